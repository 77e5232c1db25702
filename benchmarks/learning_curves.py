"""Learning curves of the CPU quickstart: held-out sampled success vs env steps, PPO and GRPO, several seeds.

    python benchmarks/learning_curves.py                          # PPO + GRPO x seeds 0 1 2 (about 25 min each)
    python benchmarks/learning_curves.py --seeds 0 --configs metaworld_ppo_tiny_cpu
    python benchmarks/learning_curves.py --from-runs runs/curves  # only re-plot finished runs

For each config it warm-starts once (`vla-sft`, seed 0), then runs `vla-train` per seed with a held-out
evaluation every `--val-interval` epochs. It writes `<out>/learning_curves.png` (needs matplotlib: the app's
`plots` extra), `<out>/learning_curves.json`, and prints a markdown table and, per config, the gain in sampled
success after RL against the bound (+0.30).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

GAIN_BOUND = 0.30


def run(cmd: list[str]) -> str:
    print("$", " ".join(cmd), flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out.stdout


def train_curves(args: argparse.Namespace) -> None:
    bin_dir = Path(sys.executable).parent
    for config in args.configs:
        root = Path(args.runs) / config
        policy = (
            run([str(bin_dir / "vla-sft"), config, f"runner.logger.log_path={root}"]).strip().splitlines()[-1]
        )
        for seed in args.seeds:
            run(
                [
                    str(bin_dir / "vla-train"),
                    config,
                    f"actor.model.model_path={policy}",
                    f"runner.seed={seed}",
                    f"runner.val_check_interval={args.val_interval}",
                    f"runner.logger.log_dir={root / f'seed{seed}'}",
                    "runner.progress_bar=false",
                    *args.overrides,
                ]
            )


def curve_of(summary: dict) -> list[tuple[int, float]]:
    """(env_steps, held-out sampled success) points: before RL, every val check, after RL."""
    points = [(0, summary["success_before_rl"])]
    for row in summary.get("history", []):
        if "eval/success_once" in row:
            points.append((int(row["env_steps"]), float(row["eval/success_once"])))
    if "success_after_rl" in summary and (not points or points[-1][0] != summary["env_steps"]):
        points.append((int(summary["env_steps"]), summary["success_after_rl"]))
    return points


def train_curve_of(summary: dict) -> list[tuple[int, float]]:
    """(env_steps, success of the training episodes finished in that epoch's rollout) per epoch."""
    return [
        (int(row["env_steps"]), float(row["env/success_once"]))
        for row in summary.get("history", [])
        if row.get("env/success_once") is not None
    ]


def collect(runs: Path) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for path in sorted(runs.rglob("summary.json")):
        summary = json.loads(path.read_text())
        if "success_before_rl" not in summary or "success_after_rl" not in summary:
            continue
        found.setdefault(summary["config"], []).append(summary)
    return found


def plot(found: dict[str, list[dict]], out: Path) -> Path | None:
    """One panel per config: held-out success per seed (markers), their mean (thick line), and the success of
    each seed's training episodes per iteration (faint dashed lines)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install 'train-embodied[plots]'): no PNG written")
        return None
    fig, axes = plt.subplots(1, len(found), figsize=(6 * len(found), 4.5), squeeze=False)
    for ax, (config, summaries) in zip(axes[0], found.items()):
        curves = [curve_of(s) for s in summaries]
        for i, (summary, curve) in enumerate(zip(summaries, curves)):
            color = f"C{i}"
            xs, ys = zip(*curve)
            ax.plot(
                xs, ys, marker="o", color=color, linewidth=1, label=f"seed {summary.get('seed', i)}: held-out"
            )
            train = train_curve_of(summary)
            if train:
                tx, ty = zip(*train)
                ax.plot(
                    tx,
                    ty,
                    color=color,
                    alpha=0.3,
                    linestyle="--",
                    label=f"seed {summary.get('seed', i)}: training",
                )
        if len(curves) > 1 and len({len(c) for c in curves}) == 1:
            xs = [sum(c[k][0] for c in curves) / len(curves) for k in range(len(curves[0]))]
            ys = [sum(c[k][1] for c in curves) / len(curves) for k in range(len(curves[0]))]
            ax.plot(xs, ys, color="black", linewidth=2.5, label=f"mean of {len(curves)} seeds (held-out)")
        ax.set_title(config)
        ax.set_xlabel("env steps (policy decisions x chunk)")
        ax.set_ylabel("success rate (sampled actions)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(
        "MetaWorld drawer-close-v3, tiny OpenVLA-OFT warm-started by SFT, 2 CPU cores; held-out = 50 unseen starts"
    )
    png = out / "learning_curves.png"
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    return png


def table(found: dict[str, list[dict]]) -> str:
    lines = [
        "| config | seed | sampled before | sampled after | greedy before | greedy after | env steps | wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for config, summaries in found.items():
        for i, s in enumerate(summaries):
            lines.append(
                f"| {config} | {s.get('seed', i)} | {s['success_before_rl']:.2f} | {s['success_after_rl']:.2f} | "
                f"{s.get('success_before_rl_greedy', float('nan')):.2f} | "
                f"{s.get('success_after_rl_greedy', float('nan')):.2f} | {s['env_steps']} | {s['wall_seconds']:.0f} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--configs", nargs="+", default=["metaworld_ppo_tiny_cpu", "metaworld_grpo_tiny_cpu"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--val-interval", type=int, default=10)
    parser.add_argument("--runs", default="runs/curves", help="folder for the runs")
    parser.add_argument("--out", default="benchmarks/results", help="folder for the PNG and JSON")
    parser.add_argument(
        "--from-runs", default=None, help="skip training; plot the summary.json files found here"
    )
    parser.add_argument("overrides", nargs="*", help="extra vla-train overrides")
    args = parser.parse_args()
    if args.from_runs is None:
        train_curves(args)
    found = collect(Path(args.from_runs or args.runs))
    if not found:
        print("no finished runs found")
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "learning_curves.json").write_text(
        json.dumps(
            {c: [{"eval": curve_of(s), "train": train_curve_of(s)} for s in ss] for c, ss in found.items()},
            indent=2,
        )
    )
    png = plot(found, out)
    print(table(found))
    for config, summaries in found.items():
        gains = [s["success_after_rl"] - s["success_before_rl"] for s in summaries]
        mean_gain = sum(gains) / len(gains)
        spread = (sum((g - mean_gain) ** 2 for g in gains) / max(len(gains) - 1, 1)) ** 0.5
        print(
            f"{config}: gain in sampled success {mean_gain:+.2f} (seed-to-seed std {spread:.2f}) over "
            f"{len(gains)} seed(s); ratio to the +{GAIN_BOUND:.2f} bound: {mean_gain / GAIN_BOUND:.2f}"
        )
    if png:
        print(f"plot: {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
