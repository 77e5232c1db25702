"""Memory of a multi-task GRPO run's env workers: each row laid out in its group's task, or in row % num_tasks.

    python benchmarks/env_worker_memory.py                                   # metaworld_mt10_grpo_tiny_cpu
    python benchmarks/env_worker_memory.py --config metaworld_mt10_grpo_tiny_cpu --bound 0.7

GRPO resets group k of `group_size` rows to one start of task k (`train_embodied.starts.group_reset_ids`). A
simulator keeps every task env it has built, so a row whose pre-built task (`vla_envs.EnvConfig.row_tasks`) is not
its group's holds two. The script builds the config's training env twice, as the trainer builds it for GRPO (the
rows laid out in the groups: `train_embodied.run_workers.train_env_configs`) and with the rows in row % num_tasks
(`use_fixed_reset_state_ids` false), runs two GRPO resets and a few steps in each, and prints every worker's
resident memory (VmRSS) and the ratio of the laid-out total to the other against the bound (`--bound`).
"""

from __future__ import annotations

import argparse

import numpy as np

from train_embodied.config import load_train_config
from train_embodied.run_workers import train_env_configs
from train_embodied.starts import group_reset_ids
from vla_envs import make_env


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def worker_memory(tc, fixed: bool) -> list[float]:
    """VmRSS (MB) of each env worker after two GRPO resets and three steps."""
    (cfg,) = train_env_configs(tc)  # one pipeline stage: the whole training env
    env = make_env(cfg if fixed else cfg.replace(use_fixed_reset_state_ids=False))
    try:
        for iteration in range(2):
            env.reset(reset_state_ids=group_reset_ids(tc, env.num_tasks, iteration))
            for _ in range(3):
                env.chunk_step(np.zeros((env.num_envs, 1, env.action_dim), np.float32))
        return [rss_mb(w.process.pid) for w in env.workers]
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default="metaworld_mt10_grpo_tiny_cpu", help="a multi-task GRPO config")
    parser.add_argument("--bound", type=float, default=0.7, help="largest laid-out / row % num_tasks ratio")
    args = parser.parse_args()
    tc = load_train_config(args.config, [], check_paths=False)
    if tc.env_train.envs_per_worker == 0:
        raise SystemExit(f"{args.config}: env.train.envs_per_worker=0 runs no worker processes to measure")
    mb = {fixed: worker_memory(tc, fixed) for fixed in (False, True)}
    for fixed, values in mb.items():
        layout = "the groups (as the trainer builds it)" if fixed else "row % num_tasks"
        print(f"rows laid out in {layout}: env workers {', '.join(f'{v:.0f}' for v in values)} MB")
    ratio = sum(mb[True]) / sum(mb[False])
    print(f"ratio {ratio:.2f} (bound {args.bound}): {'pass' if ratio <= args.bound else 'FAIL'}")


if __name__ == "__main__":
    main()
