"""PutOnPlateInScene25Main-v3 env-step time with the step-cost options against the task as written.

    MS_ASSET_DIR=P MANISKILL_ASSET_DIR=P python benchmarks/maniskill_put_on_plate_step.py [--episodes 2] [--bound 0.35]

P: the real assets or the pack of `scripts/maniskill_standin_assets.py`. In one process (one torch and one llvmpipe
thread, as in an env worker), the task is built as written (`grasp_check="all"`, its 640 x 480 camera) and with
each option of `vla_envs.maniskill.put_on_plate_cost` (`grasp_check="source"`, `render_scale=0.25`, both); the
scripted expert drives the first from `--episodes` starts and the same actions go to every env, step by step in
turn (so all see the same background load). Prints the mean seconds per env-step of each, the task's `evaluate()`
and observation shares, the ratio of both options to as written (exit 1 above `--bound`), and asserts that states,
rewards and success stayed bit-identical.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def timed(evaluate: Any, seconds: list[float]) -> Any:
    """`evaluate` (the task's bound method) that appends its wall time to `seconds`; it stays the only call the
    step makes (a second call would count a held grasp twice)."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = evaluate(*args, **kwargs)
        seconds.append(time.perf_counter() - t0)
        return out

    return wrapper


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument(
        "--bound", type=float, default=0.35, help="largest accepted ratio both options / as written"
    )
    parser.add_argument("--asset-dir", default=os.environ.get("MS_ASSET_DIR"))
    args = parser.parse_args()
    if not args.asset_dir:
        print("set MS_ASSET_DIR (or --asset-dir) to the assets, e.g. the stand-in pack", file=sys.stderr)
        return 2
    os.environ.setdefault("LP_NUM_THREADS", "1")
    from vla_envs import EnvConfig
    from vla_envs.maniskill import put_on_plate

    pack = str(Path(args.asset_dir).resolve())
    put_on_plate.prepare_process(Path(pack), Path(pack))
    from vla_envs.maniskill.cpu_sim import PutOnPlateSim
    from vla_envs.maniskill.options import resolve_options
    from vla_envs.maniskill.put_on_plate_expert import PutOnPlateExpert

    variants = {
        "as written": {"grasp_check": "all"},
        "grasp_check=source": {"grasp_check": "source"},
        "render_scale=0.25": {"grasp_check": "all", "render_scale": 0.25},
        "both": {"grasp_check": "source", "render_scale": 0.25},
    }
    sims = {}
    for name, extra in variants.items():
        cfg = EnvConfig(
            env_type="maniskill", task="PutOnPlateInScene25Main-v3", image_size=64, max_episode_steps=40,
            num_trials_per_task=1000, reward_mode="dense", extra={"asset_dir": pack, **extra},
        )  # fmt: skip
        sims[name] = PutOnPlateSim(cfg, resolve_options(cfg))
    step_s: dict[str, list[float]] = {k: [] for k in sims}
    eval_s: dict[str, list[float]] = {k: [] for k in sims}
    eval_timer: dict[str, list[float]] = {k: [] for k in sims}
    for name, sim in sims.items():
        sim.base.evaluate = timed(sim.base.evaluate, eval_timer[name])
    expert = PutOnPlateExpert()
    successes = 0
    try:
        for episode in range(args.episodes):
            for sim in sims.values():
                sim.reset(episode)
            expert.reset()
            for _ in range(40):
                action = expert.act(sims["as written"].base)
                results = {}
                for name, sim in sims.items():
                    eval_timer[name].clear()
                    t0 = time.perf_counter()
                    results[name] = sim.step(action)
                    step_s[name].append(time.perf_counter() - t0)
                    eval_s[name].append(sum(eval_timer[name]))
                ref = results["as written"]
                ref_q = sims["as written"].base.agent.robot.get_qpos().numpy()
                for name, (_obs, reward, success, _) in results.items():
                    assert (reward, success) == ref[1:3], name
                    assert np.array_equal(sims[name].base.agent.robot.get_qpos().numpy(), ref_q), name
                if ref[2]:
                    successes += 1
                    break
    finally:
        for sim in sims.values():
            sim.close()
    print(
        f"{args.episodes} expert episodes ({successes} successes), {len(step_s['as written'])} env-steps each"
    )
    written = float(np.mean(step_s["as written"]))
    for name in sims:
        mean, ev = float(np.mean(step_s[name])), float(np.mean(eval_s[name]))
        print(
            f"  {name:>20}: {mean:.4f} s per env-step (evaluate() {ev:.4f} s); ratio to as written {mean / written:.3f}"
        )
    ratio = float(np.mean(step_s["both"])) / written
    verdict = "PASS" if ratio <= args.bound else "FAIL"
    print(
        f"both options / as written: {ratio:.3f} (bound {args.bound}) {verdict}; states, rewards, success identical"
    )
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
