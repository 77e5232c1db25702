"""Env/policy pipelining (rollout.pipeline_stage_num) of the trainer's own rollout loop, on real MetaWorld with the
tiny OpenVLA-OFT policy.

The trainer's path: env worker groups (one per stage, simulators in subprocesses) and a rollout worker group on the
local backend, driven by `train_embodied.rollout.collect_rollout`. Measures, for ``--num-envs`` MetaWorld envs:
  t_env     one chunk_step of a stage alone (no policy running)
  t_policy  one predict of a stage alone (no simulator stepping)
then the rollout with pipeline_stage_num 1 and 2, and the two stages of 2 one after the other (no overlap), and
prints

  overlap efficiency (stage 2) = ideal / achieved,  ideal = T * S * max(t_env, t_policy) + min(t_env, t_policy)
  speedup                      = time(stage 1) / time(stage 2)

The ideal bound is what perfect overlap of the stage-alone times gives. Target: efficiency >= 0.95.

    python benchmarks/rollout_pipeline.py --num-envs 4 --steps 20 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

from vla_envs import EnvConfig  # first: sets MUJOCO_GL before metaworld imports mujoco


def env_config(num_envs: int, args: argparse.Namespace, seed: int) -> EnvConfig:
    return EnvConfig(
        env_type="metaworld",
        task="drawer-close-v3",
        num_envs=num_envs,
        envs_per_worker=args.envs_per_subprocess or num_envs,
        image_size=args.image_size,
        max_episode_steps=10_000,
        action_repeat=args.action_repeat,
        seed=seed,
    )


def build_groups(args: argparse.Namespace):
    """Env groups of one stage (all envs) and of two stages (half each), and one rollout group."""
    from train_embodied.config.sections import ModelSection, RolloutSection
    from train_embodied.workers import EnvWorker, RolloutWorker
    from vla_infra import WorkerGroup, make_backend

    backend = make_backend("local")
    n = args.num_envs

    def group(name: str, rows: int, seed: int) -> WorkerGroup:
        return WorkerGroup(
            EnvWorker, 1, backend=backend, name=name, kwargs={"env_cfg": env_config(rows, args, seed)}
        )

    stages = {1: [group("one_stage", n, 0)], 2: [group(f"stage_{s}", n // 2, s) for s in range(2)]}
    model = ModelSection(
        image_size=args.image_size,
        use_proprio=False,
        extra={"hidden_size": args.hidden_size},
    )
    rollout = WorkerGroup(
        RolloutWorker,
        1,
        backend=backend,
        name="rollout",
        kwargs={
            "model": model,
            "env_spec": stages[1][0].spec(),
            "sampling": RolloutSection(),
            "num_threads": args.torch_threads,
        },
    )
    return backend, stages, rollout


def time_alone(env, rollout, reps: int) -> tuple[float, float]:
    """Median seconds of one chunk_step and one predict of this stage, each with the other idle."""
    obs = env.reset()
    env_times, policy_times = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = rollout.predict(obs, mode="sample")
        policy_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        obs = env.chunk_step(out.actions.numpy()).obs
        env_times.append(time.perf_counter() - t0)
    return statistics.median(env_times), statistics.median(policy_times)


def timed_rollout(stages, rollout, steps: int) -> float:
    """Seconds of one `collect_rollout` of `steps` decisions over these env stages (the trainer's loop)."""
    from train_embodied.rollout import collect_rollout

    t0 = time.perf_counter()
    collect_rollout(
        stages,
        rollout,
        num_decisions=steps,
        reset_kwargs=[{"seed": s} for s in range(len(stages))],
        bootstrap_truncation=False,
        stop_when_all_done=False,
    )
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30, help="decisions per stage in each timed rollout")
    parser.add_argument("--repeats", type=int, default=3, help="timed rollouts per stage count")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--action-repeat", type=int, default=4)
    parser.add_argument("--alone-reps", type=int, default=5, help="steps per stage-alone timing")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument(
        "--envs-per-subprocess",
        type=int,
        default=0,
        help="envs per simulator subprocess; 0 = one subprocess per stage (one core for the simulator, one for "
        "the policy)",
    )
    args = parser.parse_args()
    if args.num_envs % 2:
        parser.error("--num-envs must be even (two stages of equal size)")
    load_before = os.getloadavg()[0]
    torch.set_num_threads(args.torch_threads)
    backend, stages, rollout = build_groups(args)
    rows = []  # per repeat: stage-alone times measured around the rollouts, and the rollout times
    try:
        timed_rollout(stages[1], rollout, 3)  # warm-up
        timed_rollout(stages[2], rollout, 3)
        for _ in range(args.repeats):
            # The machine may be shared: measure the stage-alone times right before and after this repeat's
            # rollouts and use their mean, so the bound sees the same background load as the rollouts.
            before = [time_alone(stages[s][0], rollout, reps=args.alone_reps) for s in (1, 2)]
            achieved1 = timed_rollout(stages[1], rollout, args.steps)
            achieved2 = timed_rollout(stages[2], rollout, args.steps)
            sequential2 = sum(timed_rollout([stage], rollout, args.steps) for stage in stages[2])
            after = [time_alone(stages[s][0], rollout, reps=args.alone_reps) for s in (1, 2)]
            (e1, p1), (e2, p2) = [tuple((a + b) / 2 for a, b in zip(x, y)) for x, y in zip(before, after)]
            ideal1 = args.steps * (e1 + p1)
            ideal2 = args.steps * 2 * max(e2, p2) + min(e2, p2)
            rows.append((e1, p1, e2, p2, achieved1, achieved2, ideal1, ideal2, sequential2))
    finally:
        for group in [*stages[1], *stages[2]]:
            group.close()
        for group in [*stages[1], *stages[2], rollout]:
            group.shutdown()
        backend.shutdown()

    print(
        f"{args.num_envs} envs, {args.steps} decisions per stage, image {args.image_size}, "
        f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(
        "repeat  t_env1  t_pol1  t_env2  t_pol2 (ms)   stage1 s (bound)   stage2 s (bound)   stage2 no-overlap s"
        "   efficiency  speedup"
    )
    for i, (e1, p1, e2, p2, a1, a2, i1, i2, s2) in enumerate(rows):
        print(
            f"{i:6d}  {e1 * 1e3:6.1f}  {p1 * 1e3:6.1f}  {e2 * 1e3:6.1f}  {p2 * 1e3:6.1f}        "
            f"{a1:6.3f} ({i1:6.3f})   {a2:6.3f} ({i2:6.3f})   {s2:18.3f}   {i2 / a2:10.3f}  {a1 / a2:7.3f}"
        )
    efficiency = statistics.median(r[7] / r[5] for r in rows)
    speedup = statistics.median(r[4] / r[5] for r in rows)
    overlap_gain = statistics.median(r[8] / r[5] for r in rows)
    print(f"overlap efficiency (stage 2) = ideal / achieved, median = {efficiency:.3f}  (target >= 0.95)")
    print(f"speedup stage 2 over stage 1, median = {speedup:.3f}")
    print(f"speedup of overlap vs the same two stages run one after the other, median = {overlap_gain:.3f}")
    assert np.isfinite(efficiency)


if __name__ == "__main__":
    main()
