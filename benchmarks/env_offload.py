"""Env offload (`env.enable_offload`): host memory the simulator processes free, and the time to bring them back.

    python benchmarks/env_offload.py                                   # metaworld, libero, maniskill, robotwin
    python benchmarks/env_offload.py --sims metaworld,libero --num-envs 4

For each simulator available here, builds a small batched env (the simulators in one subprocess worker, or
RoboTwin's own process), runs a reset and a few chunk steps, and prints:

- the resident memory of the simulator processes (VmRSS and PSS, summed over each process and its children)
  before `offload()` and after it (the processes are gone, so 0 is expected: the script checks they exited),
- the time of `offload()`, and the time to bring the simulators back: the first `reset()` after the offload
  (rebuild + reset) against the same `reset()` on resident simulators (the bring-back overhead is the difference),
- whether the observations of that reset and of the following steps equal those of the resident simulators.

ManiSkill runs with its CPU backend (the GPU backend cannot be offloaded: `vla_envs.check_env_offload`).
RoboTwin needs its own environment (`ROBOTWIN_VENV`, built by `scripts/setup_robotwin.sh`); it is skipped without.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from vla_envs import EnvConfig, make_env  # first: sets MUJOCO_GL before a simulator imports mujoco

ROOT = Path(__file__).resolve().parents[1]
ROBOTWIN_VENV = Path(os.environ.get("ROBOTWIN_VENV") or ROOT / ".venv-robotwin")


def configs(num_envs: int) -> dict[str, EnvConfig | str]:
    """Simulator -> the env config measured (or why it is skipped here)."""
    one_worker = {"num_envs": num_envs, "envs_per_worker": num_envs, "seed": 0}
    out: dict[str, EnvConfig | str] = {
        "metaworld": EnvConfig(env_type="metaworld", task="drawer-close-v3", image_size=128, **one_worker),
        "libero": EnvConfig(env_type="libero", task_set="libero_10", image_size=224, **one_worker),
        "maniskill": EnvConfig(
            env_type="maniskill",
            task="PickCube-v1",
            image_size=224,
            extra={"sim_backend": "cpu"},
            **one_worker,
        ),
    }
    if (ROBOTWIN_VENV / ".robotwin-ready").is_file():
        task_config = {
            "domain_randomization": {
                "random_background": False,
                "cluttered_table": False,
                "random_light": False,
            }
        }
        out["robotwin"] = EnvConfig(
            env_type="robotwin", task="stack_blocks_two", num_envs=num_envs, image_size=224, seed=0,
            num_trials_per_task=20,
            extra={
                "task_config": task_config, "robotwin_python": str(ROBOTWIN_VENV / "bin/python"),
                "assets_path": str(ROBOTWIN_VENV / "robotwin-assets"), "camera_shader": "default",
            },
        )  # fmt: skip
    else:
        out["robotwin"] = (
            f"no RoboTwin environment at {ROBOTWIN_VENV} (scripts/setup_robotwin.sh, ROBOTWIN_VENV)"
        )
    return out


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    return kids


def process_tree(pids: list[int]) -> list[int]:
    """`pids` and all their descendants that are alive (zombies excluded)."""
    kids, out, todo = _children(), [], list(pids)
    while todo:
        pid = todo.pop()
        if alive(pid):
            out.append(pid)
        todo += kids.get(pid, [])
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def memory_mb(pids: list[int]) -> tuple[float, float]:
    """(VmRSS, PSS) in MB summed over `pids`; PSS splits pages shared between processes."""
    rss = pss = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                rss += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
            with open(f"/proc/{pid}/smaps_rollup") as f:
                pss += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except (OSError, StopIteration):
            continue
    return rss / 1024, pss / 1024


def actions(env: Any, steps: int) -> list[np.ndarray]:
    """Actions inside the range (the middle plus seeded noise), [B, 1, A] per step."""
    rng = np.random.default_rng(0)
    low, high = np.asarray(env.action_low, np.float32), np.asarray(env.action_high, np.float32)
    mid, half = (low + high) / 2, np.minimum((high - low) / 2, 1.0) * 0.2
    return [
        np.clip(mid + rng.uniform(-1, 1, (env.num_envs, 1, env.action_dim)) * half, low, high).astype(
            np.float32
        )
        for _ in range(steps)
    ]


def phase(env: Any, ids: np.ndarray, acts: list[np.ndarray]) -> tuple[float, list[np.ndarray]]:
    """A rollout's start: (reset seconds, the reset's and the steps' images and states)."""
    t0 = time.perf_counter()
    obs = env.reset(seed=1, reset_state_ids=ids)
    seconds = time.perf_counter() - t0
    out = [obs["images"], obs["states"]]
    for a in acts:
        res = env.chunk_step(a)
        out += [res.obs["images"], res.obs["states"], res.rewards]
    return seconds, out


def measure(name: str, cfg: EnvConfig, steps: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    env = make_env(cfg)
    build_s = time.perf_counter() - t0
    try:
        ids = np.arange(env.num_envs) % env.num_reset_states
        acts = actions(env, steps)
        resident_reset_s, want = phase(env, ids, acts)
        resident_reset_s, want = phase(env, ids, acts)  # the second: caches warm, as in a later iteration
        pids = process_tree(env.simulator_pids())
        rss_before, pss_before = memory_mb(pids)
        t0 = time.perf_counter()
        env.offload()
        offload_s = time.perf_counter() - t0
        time.sleep(0.5)
        left = [p for p in pids if alive(p)]
        rss_after, pss_after = memory_mb(left)
        back_reset_s, got = phase(env, ids, acts)
        same = len(want) == len(got) and all(np.array_equal(a, b) for a, b in zip(want, got, strict=True))
    finally:
        env.close()
    return {
        "sim": name, "processes": len(pids), "alive_after": len(left), "rss_before": rss_before,
        "pss_before": pss_before, "rss_after": rss_after, "pss_after": pss_after, "offload_s": offload_s,
        "build_s": build_s, "resident_reset_s": resident_reset_s, "back_reset_s": back_reset_s, "same": same,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sims", default="metaworld,libero,maniskill,robotwin", help="comma-separated")
    parser.add_argument("--num-envs", type=int, default=2, help="envs per simulator (one worker process)")
    parser.add_argument("--steps", type=int, default=3, help="chunk steps after each reset")
    args = parser.parse_args()
    cfgs = configs(args.num_envs)
    rows = []
    for name in args.sims.split(","):
        cfg = cfgs[name]
        if isinstance(cfg, str):
            print(f"{name}: skipped: {cfg}")
            continue
        try:
            row = measure(name, cfg, args.steps)
        except Exception as exc:  # a simulator missing here: say so and measure the others
            print(f"{name}: skipped: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}")
            continue
        rows.append(row)
        print(
            f"{name}: {row['processes']} simulator process(es), {args.num_envs} envs: VmRSS {row['rss_before']:.0f} MB "
            f"(PSS {row['pss_before']:.0f} MB) -> {row['rss_after']:.0f} MB after offload "
            f"({row['alive_after']} process(es) left; offload {row['offload_s']:.2f} s); "
            f"bring back (rebuild + reset) {row['back_reset_s']:.1f} s vs resident reset {row['resident_reset_s']:.2f} s "
            f"(first build {row['build_s']:.1f} s); same observations and rewards: {row['same']}"
        )
    if any(r["alive_after"] or not r["same"] for r in rows):
        raise SystemExit("FAIL: a simulator process outlived offload(), or the rollout after it differed")


if __name__ == "__main__":
    main()
