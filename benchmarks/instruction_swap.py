"""Does a multi-task MetaWorld policy read its instruction? Held-out success with each task's own instruction and
with the instructions of scene-sharing task pairs exchanged.

    python benchmarks/instruction_swap.py --policy <sft folder>/policy
    python benchmarks/instruction_swap.py --policy <folder> --config metaworld_mt10_grpo_tiny_cpu --seed 0

The pairs share a scene (window-open / window-close, drawer-open / drawer-close, reach / push), so with the other
task's instruction a policy that acts on its instruction attempts the other task and fails, while one that acts on
the scene alone keeps its success. The tasks outside the pairs are the control: their instructions are unchanged.
Each evaluation is `vla-eval` in a child process, with the simulators in that process (`env.eval.envs_per_worker=0`)
so that the exchanged `vla_envs.metaworld.TASK_DESCRIPTIONS` reach them; both use the same seed and held-out starts.
It prints per-task success both ways and the mean over the paired tasks against the bound (`--bound`): the swapped
success as a fraction of the as-given one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

PAIRS = (
    ("window-open-v3", "window-close-v3"),
    ("drawer-open-v3", "drawer-close-v3"),
    ("reach-v3", "push-v3"),
)


def child(mode: str, policy: str, config: str, seed: int, log_dir: str, overrides: list[str]) -> int:
    """One held-out evaluation; with mode "swapped" each pair's instructions are exchanged first."""
    from vla_envs.metaworld import TASK_DESCRIPTIONS

    if mode == "swapped":
        for a, b in PAIRS:
            TASK_DESCRIPTIONS[a], TASK_DESCRIPTIONS[b] = TASK_DESCRIPTIONS[b], TASK_DESCRIPTIONS[a]
    from train_embodied.cli import eval_main

    return eval_main(
        [
            config,
            f"actor.model.model_path={policy}",
            "env.eval.envs_per_worker=0",
            f"runner.seed={seed}",
            "runner.eval_greedy=false",
            f"runner.logger.log_dir={log_dir}",
            "runner.progress_bar=false",
            *overrides,
        ]
    )


def task_success(log_dir: Path) -> dict[str, float]:
    tables = json.loads((log_dir / "summary.json").read_text())["eval_tables"]["eval"]["sample"]["tasks"]
    return {task: row["success_once"] for task, row in tables.items()}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policy", required=True, help="policy folder (a vla-sft or vla-train output)")
    parser.add_argument(
        "--config", default="metaworld_mt10_ppo_tiny_cpu", help="a MetaWorld multi-task config"
    )
    parser.add_argument("--seed", type=int, default=1, help="runner.seed of both evaluations")
    parser.add_argument(
        "--out", default=None, help="folder for the two evaluations' logs (default: a temp folder)"
    )
    parser.add_argument(
        "--bound", type=float, default=0.5, help="largest swapped / as-given ratio that passes"
    )
    parser.add_argument("--child", choices=["as-given", "swapped"], help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="extra vla-eval overrides")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="instruction_swap_"))
    if args.child:
        return child(args.child, args.policy, args.config, args.seed, str(out / args.child), args.overrides)
    success = {}
    for mode in ("as-given", "swapped"):
        cmd = [sys.executable, __file__, "--child", mode, "--policy", args.policy, "--config", args.config]
        cmd += ["--seed", str(args.seed), "--out", str(out), *args.overrides]
        print(f"[{mode}] held-out evaluation ...", flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        success[mode] = task_success(out / mode)
    paired = [t for pair in PAIRS for t in pair]
    print("| task | instruction | as given | swapped |\n|---|---|---|---|")
    for task, given in success["as-given"].items():
        kind = "exchanged" if task in paired else "its own (control)"
        print(f"| {task} | {kind} | {given:.2f} | {success['swapped'][task]:.2f} |")
    given = sum(success["as-given"][t] for t in paired) / len(paired)
    swapped = sum(success["swapped"][t] for t in paired) / len(paired)
    ratio = swapped / given if given > 0 else float("nan")
    verdict = "reads its instruction" if ratio <= args.bound else "does NOT read its instruction"
    print(
        f"paired tasks: success {given:.3f} as given, {swapped:.3f} swapped; ratio {ratio:.2f} "
        f"(bound {args.bound}): the policy {verdict}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
