"""MetaWorld image throughput: N subprocess workers vs N x the single-env rate measured in the same run.

    python benchmarks/env_throughput.py --workers 2 --image-size 64 --steps 100 --rounds 3

Builds one in-process env and one env of N workers (one env each), then alternates timed blocks of `steps`
batched steps between them (`rounds` times, so that both see the same background load) and prints the median
images/s of each and the scaling efficiency `rate_N / (N * rate_1)` (1.0 = linear scaling; it cannot reach
1 when fewer than N cores are free). Every step renders one image (`action_repeat` sim steps per image).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from vla_envs import BatchedEnv, EnvConfig, make_env


def timed_block(env: BatchedEnv, steps: int, rng: np.random.Generator) -> float:
    """Images/s over `steps` batched steps with random actions."""
    start = time.perf_counter()
    for _ in range(steps):
        env.step(rng.uniform(-1, 1, (env.num_envs, 4)).astype(np.float32))
    return env.num_envs * steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--action-repeat", type=int, default=1)
    parser.add_argument("--task", default="drawer-close-v3")
    parser.add_argument("--hide-far-meshes", action="store_true")
    args = parser.parse_args()
    base = EnvConfig(
        env_type="metaworld", task=args.task, image_size=args.image_size, action_repeat=args.action_repeat,
        max_episode_steps=100, extra={"hide_far_meshes": args.hide_far_meshes},
    )  # fmt: skip
    os.environ.setdefault("LP_NUM_THREADS", "1")  # same llvmpipe setting as the workers
    rng = np.random.default_rng(0)
    single_env = make_env(base.replace(num_envs=1, envs_per_worker=0))
    multi_env = make_env(base.replace(num_envs=args.workers, envs_per_worker=1))
    try:
        for env in (single_env, multi_env):
            env.reset(seed=0)
            timed_block(env, 3, rng)  # warm-up
        single, multi = [], []
        for _ in range(args.rounds):
            single.append(timed_block(single_env, args.steps, rng))
            multi.append(timed_block(multi_env, args.steps, rng))
    finally:
        single_env.close()
        multi_env.close()
    s, m = statistics.median(single), statistics.median(multi)
    print(f"cpu cores: {os.cpu_count()}  load average (1 min): {os.getloadavg()[0]:.1f}  task: {args.task}")
    print(
        f"image: {args.image_size}px  action_repeat: {args.action_repeat}  hide_far_meshes: {args.hide_far_meshes}"
    )
    print(f"single env in-process: {s:.1f} images/s (rounds: {', '.join(f'{x:.1f}' for x in single)})")
    print(
        f"{args.workers} workers x 1 env: {m:.1f} images/s (rounds: {', '.join(f'{x:.1f}' for x in multi)})"
    )
    print(f"scaling efficiency rate_N / (N * rate_1) = {m / (args.workers * s):.2f}")


if __name__ == "__main__":
    main()
