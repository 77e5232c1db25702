"""Learning curves of the CPU quickstart: held-out sampled success vs env steps, PPO and GRPO, several seeds.

    python benchmarks/learning_curves.py                          # PPO + GRPO x seeds 0 1 2 (about 25 min each)
    python benchmarks/learning_curves.py --seeds 0 --configs metaworld_ppo_tiny_cpu
    python benchmarks/learning_curves.py --from-runs runs/curves  # only re-plot finished runs
    python benchmarks/learning_curves.py --configs metaworld_ppo_pi0_tiny_cpu --policy <sft folder>/policy \
        --variant sde= --variant noise=actor.model.openpi.noise_method=flow_noise --jobs 6 --out <folder>

For each config it warm-starts once (`vla-sft`, seed 0; or uses `--policy`), then runs `vla-train` per variant
and seed with a held-out evaluation every `--val-interval` epochs, `--jobs` runs at a time (one torch thread
each). A variant is `NAME=override,override,...`. It writes `<out>/learning_curves.png` (needs matplotlib: the
app's `plots` extra), `<out>/learning_curves.json`, and prints a markdown table, for multi-task runs (MT10) each
task's held-out success before -> after RL with the tasks that fell by more than the evaluation's noise, and, per
config and variant, the gain in sampled success after RL against the bound (`--gain-bound`, +0.30).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def run(cmd: list[str], env: dict[str, str] | None = None) -> str:
    print("$", " ".join(cmd), flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"exit {out.returncode}: {' '.join(cmd)}\n{out.stderr[-3000:]}")
    return out.stdout


def entry(name: str) -> list[str]:
    """The ``vla-sft`` / ``vla-train`` command: the installed script, or the module when only sources are on
    ``PYTHONPATH``."""
    script = Path(sys.executable).parent / name
    if script.exists():
        return [str(script)]
    main = {"vla-sft": "sft_main", "vla-train": "train_main"}[name]
    return [sys.executable, "-c", f"import sys; from train_embodied.cli import {main}; sys.exit({main}())"]


def variants(specs: list[str]) -> dict[str, list[str]]:
    """``NAME=override,override`` -> {NAME: [overrides]}; no spec is one unnamed variant."""
    out: dict[str, list[str]] = {}
    for spec in specs or ["="]:
        name, _, rest = spec.partition("=")
        # commas inside [...] or {...} belong to a list or dict value (noise_logvar_range=[0.16,0.32])
        out[name] = [o for o in re.split(r",(?![^\[{]*[\]}])", rest) if o]
    return out


def train_curves(args: argparse.Namespace) -> None:
    jobs = []
    for config in args.configs:
        root = Path(args.runs) / config
        policy = (
            args.policy
            or (run([*entry("vla-sft"), config, f"runner.logger.log_path={root}"]).strip().splitlines()[-1])
        )
        for name, extra in variants(args.variant).items():
            for seed in args.seeds:
                jobs.append(
                    [
                        *entry("vla-train"),
                        config,
                        f"actor.model.model_path={policy}",
                        f"runner.seed={seed}",
                        f"runner.val_check_interval={args.val_interval}",
                        f"runner.logger.log_dir={root / name / f'seed{seed}'}",
                        "runner.progress_bar=false",
                        *args.overrides,
                        *extra,
                    ]
                )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run, cmd, env) for cmd in jobs]
    failed = [f.exception() for f in futures if f.exception() is not None]
    for err in failed:
        print(f"run failed: {err}", file=sys.stderr)
    print(f"{len(jobs) - len(failed)} of {len(jobs)} runs finished")


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
    """Finished runs grouped by config (and variant: the folder between the config's and the seed's)."""
    found: dict[str, list[dict]] = {}
    for path in sorted(runs.rglob("summary.json")):
        summary = json.loads(path.read_text())
        if "success_before_rl" not in summary or "success_after_rl" not in summary:
            continue
        rel = path.parent.relative_to(runs).parts
        variant = "/".join(rel[1:-1]) if len(rel) > 2 else ""
        found.setdefault(summary["config"] + (f" [{variant}]" if variant else ""), []).append(summary)
    return found


def default_title(found: dict[str, list[dict]]) -> str:
    """What every panel shows, with the held-out episode counts the runs' evaluations report."""
    counts = sorted(
        {
            int(s.get("eval_tables", {}).get(when, {}).get("sample", {}).get("num_episodes", 0))
            for ss in found.values()
            for s in ss
            for when in ("before_rl", "after_rl")
        }
        - {0}
    )
    held = f"{' / '.join(map(str, counts))} held-out episodes" if counts else "held-out episodes"
    return (
        f"Held-out success (sampled actions) before, during and after RL from a supervised warm start; {held}"
    )


def plot(found: dict[str, list[dict]], out: Path, title: str) -> Path | None:
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
    fig.suptitle(textwrap.fill(title, width=int(11 * 6 * len(found))))  # about 11 characters per inch
    png = out / "learning_curves.png"
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    return png


def gain_and_noise(summary: dict) -> tuple[float, float, int, int]:
    """(gain in held-out sampled success, binomial std of that difference, episodes before, episodes after): the std
    is sqrt(p0 (1 - p0) / n0 + p1 (1 - p1) / n1) with the episode counts of the evaluation tables (0: unknown)."""
    p0, p1 = summary["success_before_rl"], summary["success_after_rl"]
    tables = summary.get("eval_tables", {})
    n0 = int(tables.get("before_rl", {}).get("sample", {}).get("num_episodes", 0))
    n1 = int(tables.get("after_rl", {}).get("sample", {}).get("num_episodes", 0))
    std = (p0 * (1 - p0) / n0 + p1 * (1 - p1) / n1) ** 0.5 if n0 and n1 else float("nan")
    return p1 - p0, std, n0, n1


def table(found: dict[str, list[dict]]) -> str:
    lines = [
        "| config | seed | sampled before | sampled after | gain (binomial std) | episodes | greedy before | "
        "greedy after | env steps | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for config, summaries in found.items():
        for i, s in enumerate(summaries):
            gain, std, n0, n1 = gain_and_noise(s)
            lines.append(
                f"| {config} | {s.get('seed', i)} | {s['success_before_rl']:.2f} | {s['success_after_rl']:.2f} | "
                f"{gain:+.2f} ({std:.2f}) | {n0} / {n1} | "
                f"{s.get('success_before_rl_greedy', float('nan')):.2f} | "
                f"{s.get('success_after_rl_greedy', float('nan')):.2f} | {s['env_steps']} | {s['wall_seconds']:.0f} |"
            )
    return "\n".join(lines)


def task_changes(summary: dict, mode: str = "sample") -> list[tuple[str, float, float, float]]:
    """(task, success before RL, after RL, z) per task of a multi-task run's held-out tables; z is the change
    over the binomial std of a difference of two proportions (pooled): below -2 a task fell by more than the
    evaluation's noise. Empty for a single-task run."""
    tables = summary.get("eval_tables", {})
    before = tables.get("before_rl", {}).get(mode, {}).get("tasks", {})
    after = tables.get("after_rl", {}).get(mode, {}).get("tasks", {})
    rows = []
    for task, b in before.items():
        if task not in after:
            continue
        p0, p1 = b["success_once"], after[task]["success_once"]
        n0, n1 = b["num_episodes"], after[task]["num_episodes"]
        pooled = (p0 * n0 + p1 * n1) / (n0 + n1)
        std = (pooled * (1 - pooled) * (1 / n0 + 1 / n1)) ** 0.5
        rows.append((task, p0, p1, (p1 - p0) / std if std > 0 else 0.0))
    return rows


def task_table(found: dict[str, list[dict]]) -> str:
    """Per-task held-out sampled success before -> after RL per seed, with the tasks that fell beyond the noise."""
    lines = []
    for config, summaries in found.items():
        for i, s in enumerate(summaries):
            changes = task_changes(s)
            if not changes:
                continue
            cells = ", ".join(f"{t} {b * 100:.0f} -> {a * 100:.0f}" for t, b, a, _ in changes)
            fell = [f"{t} (z {z:.1f})" for t, _, _, z in changes if z < -2]
            lines.append(
                f"{config} seed {s.get('seed', i)}: {cells}; fell beyond the noise (z < -2): "
                + (", ".join(fell) or "none")
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
        "--policy", default=None, help="warm-start policy folder for every run (skips vla-sft)"
    )
    parser.add_argument(
        "--variant", action="append", default=[], help="NAME=override,override (repeatable): runs per variant"
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (one torch thread each)")
    parser.add_argument(
        "--gain-bound", type=float, default=0.30, help="aimed gain in held-out sampled success"
    )
    parser.add_argument(
        "--title",
        default=None,
        help="the picture's title (default: the held-out episodes the runs evaluated)",
    )
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
    png = plot(found, out, args.title or default_title(found))
    print(table(found))
    per_task = task_table(found)
    if per_task:
        print(per_task)
    for config, summaries in found.items():
        gains = [s["success_after_rl"] - s["success_before_rl"] for s in summaries]
        mean_gain = sum(gains) / len(gains)
        spread = (sum((g - mean_gain) ** 2 for g in gains) / max(len(gains) - 1, 1)) ** 0.5
        print(
            f"{config}: gain in sampled success {mean_gain:+.2f} (seed-to-seed std {spread:.2f}) over "
            f"{len(gains)} seed(s); ratio to the +{args.gain_bound:.2f} bound: {mean_gain / args.gain_bound:.2f}"
        )
    if png:
        print(f"plot: {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
