"""Framework overhead: env steps/s of the rollout loop through worker groups vs a bare loop.

The same MetaWorld env (vla_envs, one simulator subprocess per env) and the same tiny OpenVLA-OFT policy
(vla_models) run
  bare   in one process: obs -> policy.predict -> env.chunk_step -> obs ...
  local  as an env worker group and a rollout worker group on vla_infra's LocalBackend
  ray    the same worker classes on RayBackend (one Ray actor each, local Ray on 127.0.0.1)
and the script prints steps/s and the ratio to the bare loop (target >= 0.95 for local).

    python benchmarks/framework_overhead.py --num-envs 4 --steps 40 [--no-ray]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from vla_envs import EnvConfig, make_env  # first: sets MUJOCO_GL before metaworld imports mujoco
from vla_infra import LocalBackend, Worker, WorkerGroup, register, resolve_placement
from vla_models import OpenVLAOFTConfig, build_policy


def env_config(args: argparse.Namespace) -> EnvConfig:
    return EnvConfig(
        env_type="metaworld",
        task="drawer-close-v3",
        num_envs=args.num_envs,
        envs_per_worker=1,
        image_size=args.image_size,
        max_episode_steps=10_000,
        action_repeat=args.action_repeat,
        seed=0,
    )


def tiny_policy(args: argparse.Namespace, action_dim: int):
    torch.manual_seed(0)
    cfg = OpenVLAOFTConfig.tiny(image_size=args.image_size, action_dim=action_dim)
    return build_policy(cfg).eval()


class EnvWorker(Worker):
    """Holds one batched MetaWorld env."""

    def __init__(self, cfg: EnvConfig) -> None:
        self.env = make_env(cfg)

    @register("one_to_all", collect="first")
    def action_dim(self) -> int:
        return self.env.action_dim

    @register("one_to_all", collect="first")
    def reset(self):
        return self.env.reset()

    @register("one_to_all", collect="first")
    def chunk_step(self, actions: np.ndarray):
        return self.env.chunk_step(actions)

    def close(self) -> None:
        self.env.close()


class RolloutWorker(Worker):
    """Holds the policy; actions for a batch of observations."""

    def __init__(self, args: argparse.Namespace, action_dim: int, torch_threads: int) -> None:
        torch.set_num_threads(torch_threads)
        self.policy = tiny_policy(args, action_dim)

    @register("one_to_all", collect="first")
    def predict(self, obs) -> np.ndarray:
        with torch.no_grad():
            return self.policy.predict(obs, mode="sample").actions.numpy()


def bare_loop(env, policy, steps: int) -> float:
    obs = env.reset()
    with torch.no_grad():
        t0 = time.perf_counter()
        for _ in range(steps):
            actions = policy.predict(obs, mode="sample").actions.numpy()
            obs = env.chunk_step(actions).obs
        return time.perf_counter() - t0


def group_loop(envs: WorkerGroup, rollout: WorkerGroup, steps: int) -> float:
    obs = envs.reset()
    t0 = time.perf_counter()
    for _ in range(steps):
        actions = rollout.predict(obs)
        obs = envs.chunk_step(actions).obs
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--action-repeat", type=int, default=4)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument(
        "--timeout-s", type=float, default=1800.0, help="the groups' call timeout (the trainer's)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.torch_threads)
    load_before = os.getloadavg()[0]
    env_steps = args.steps * args.num_envs  # chunk size 1: one env step per env per chunk step
    cfg = env_config(args)

    env = make_env(cfg)
    policy = tiny_policy(args, env.action_dim)
    placement = resolve_placement({"env": "0", "rollout": "0"}, num_nodes=1, num_gpus_per_node=0)
    backend = LocalBackend()
    # timeout_s as the trainer sets it (cluster.worker_timeout_s): every call then runs on the worker's own thread
    timed = {"timeout_s": args.timeout_s}
    envs = WorkerGroup(EnvWorker, placement["env"], backend=backend, args=(cfg,), **timed)
    rollout = WorkerGroup(
        RolloutWorker,
        placement["rollout"],
        backend=backend,
        args=(args, env.action_dim, args.torch_threads),
        **timed,
    )
    # bare runs are interleaved with each backend's runs and compared only with those (same background load)
    times: dict[str, list[float]] = {"bare_local": [], "local": []}
    try:
        bare_loop(env, policy, 3)
        group_loop(envs, rollout, 3)
        for _ in range(args.repeats):  # interleaved, so background load hits both alike
            times["bare_local"].append(bare_loop(env, policy, args.steps))
            times["local"].append(group_loop(envs, rollout, args.steps))
    finally:
        envs.shutdown()
        rollout.shutdown()

    if not args.no_ray:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        import ray

        from vla_infra import RayBackend

        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
        ray_backend = RayBackend(num_nodes=1, num_gpus_per_node=0)
        envs = WorkerGroup(EnvWorker, placement["env"], backend=ray_backend, args=(cfg,), **timed)
        rollout = WorkerGroup(
            RolloutWorker,
            placement["rollout"],
            backend=ray_backend,
            args=(args, env.action_dim, args.torch_threads),
            **timed,
        )
        times["ray"], times["bare_ray"] = [], []
        try:
            group_loop(envs, rollout, 3)
            for _ in range(args.repeats):
                times["bare_ray"].append(bare_loop(env, policy, args.steps))
                times["ray"].append(group_loop(envs, rollout, args.steps))
        finally:
            envs.shutdown()
            rollout.shutdown()
            ray.shutdown()
    env.close()

    print(
        f"MetaWorld drawer-close-v3, {args.num_envs} envs, image {args.image_size}, {args.steps} chunk steps, "
        f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    for name in ("local", "ray"):
        if name not in times:
            continue
        bare, ours = times[f"bare_{name}"], times[name]
        bare_sps, sps = env_steps / min(bare), env_steps / min(ours)
        pair_ratio = float(np.median([b / o for b, o in zip(bare, ours)]))
        print(f"bare loop : {bare_sps:8.1f} env steps/s  runs {np.round(bare, 3).tolist()} s")
        print(
            f"{name:<10}: {sps:8.1f} env steps/s  runs {np.round(ours, 3).tolist()} s  ratio to bare (best/best) "
            f"{sps / bare_sps:.3f}, median of interleaved pairs {pair_ratio:.3f}"
            + ("  (target >= 0.95)" if name == "local" else "")
        )


if __name__ == "__main__":
    main()
