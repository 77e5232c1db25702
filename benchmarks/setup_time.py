"""From `git clone` to a learned policy: how long setup and the quickstart take, the setup against its 90 s goal.

    python benchmarks/setup_time.py [--runs 3] [--modes warm cold pip] [--quickstart] [--keep DIR]

Each run clones this repository (its committed HEAD) into a fresh folder and runs the README's command there,
`bash scripts/setup.sh` (with VLA_SKIP_SYSTEM_DEPS=1 unless --system-deps), timing it from outside and reading the
time of each of its steps from its last line. Modes:

- `warm`: uv's package cache and the uv bootstrap are the ones an earlier setup filled (the first warm run fills
  them if they are empty, and is not counted);
- `cold`: an empty uv cache and no uv bootstrap (uv is fetched with pip, every package is unpacked again);
- `pip`: `VLA_INSTALLER=pip`, what setup was before uv (pip resolves and installs everything; pip keeps no wheel
  cache of its own here).

Packages come from wherever pip is configured to take them (`pip config list`), for every mode alike. With
`--quickstart`, the first clone of the first mode then runs `bash scripts/quickstart.sh` (setup again, now
already done, then the demos, warm start, evaluation, PPO, evaluation) and its figures are printed too.

Prints one line per run (wall seconds, CPU seconds of the processes, 1-minute load average before and after, the
steps), then per mode the median and its ratio to the goal (SETUP_GOAL_S); the lines are plain so that a shared
machine's load can be read beside each figure. CPU seconds near the wall time x cores mean the step is CPU-bound.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETUP_GOAL_S = 90.0
_DONE = re.compile(r"\[setup\] done in (\d+) s \((?P<steps>[^)]*)\)")


def load_average() -> float:
    return (
        float(Path("/proc/loadavg").read_text().split()[0])
        if Path("/proc/loadavg").exists()
        else float("nan")
    )


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def clone(into: Path) -> Path:
    """A fresh clone of this repository's HEAD in `into`/vla-rl."""
    dest = into / "vla-rl"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(dest)], check=True)
    return dest


def run_setup(checkout: Path, env: dict[str, str]) -> dict[str, object]:
    """Run `bash scripts/setup.sh` in `checkout`; its wall and CPU seconds, loads and steps."""
    load0, cpu0, t0 = load_average(), children_cpu_s(), time.perf_counter()
    out = subprocess.run(["bash", "scripts/setup.sh"], cwd=checkout, env=env, capture_output=True, text=True)
    wall, cpu, load1 = time.perf_counter() - t0, children_cpu_s() - cpu0, load_average()
    if out.returncode != 0:
        raise SystemExit(f"setup failed in {checkout}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    done = _DONE.search(out.stdout)
    return {"wall": wall, "cpu": cpu, "load": (load0, load1), "steps": done["steps"] if done else "?"}


def run_quickstart(checkout: Path, env: dict[str, str]) -> dict[str, object]:
    """`bash scripts/quickstart.sh` in `checkout` (setup is already done there); its wall time and summary."""
    load0, t0 = load_average(), time.perf_counter()
    out = subprocess.run(
        ["bash", "scripts/quickstart.sh", "runner.progress_bar=false"], cwd=checkout, env=env, capture_output=True,
        text=True,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"quickstart failed in {checkout}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    success = re.findall(r"eval/success_once[^\n]*", out.stdout + out.stderr)
    finished = re.search(r"\[quickstart\] finished in [^\n]*", out.stdout)
    return {
        "wall": wall,
        "load": (load0, load_average()),
        "finished": finished.group(0) if finished else "?",
        "success": success[-2:],
    }


def mode_env(
    mode: str, scratch: Path, warm_cache: Path, warm_uv_home: Path, system_deps: bool
) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    if not system_deps:
        env["VLA_SKIP_SYSTEM_DEPS"] = "1"
    if mode == "pip":
        env["VLA_INSTALLER"] = "pip"
    elif mode == "warm":
        env["UV_CACHE_DIR"], env["VLA_UV_HOME"] = str(warm_cache), str(warm_uv_home)
    else:  # cold
        env["UV_CACHE_DIR"], env["VLA_UV_HOME"] = str(scratch / "uv-cache"), str(scratch / "uv-home")
    return env


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="timed runs per mode")
    parser.add_argument("--modes", nargs="+", default=["warm", "cold"], choices=["warm", "cold", "pip"])
    parser.add_argument(
        "--quickstart", action="store_true", help="then run the quickstart in the first clone"
    )
    parser.add_argument("--system-deps", action="store_true", help="run scripts/install_system_deps.sh too")
    parser.add_argument(
        "--keep", type=Path, default=None, help="a folder for the warm cache (kept between calls)"
    )
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="setup_time_"))
    warm = args.keep or root / "warm"
    warm_cache, warm_uv_home = warm / "uv-cache", warm / "uv-home"
    medians: dict[str, float] = {}
    quickstart_done = not args.quickstart
    print(
        f"repository {REPO} (HEAD {_head()}), {os.cpu_count()} cores; goal: setup <= {SETUP_GOAL_S:.0f} s warm"
    )
    try:
        for mode in args.modes:
            if mode == "warm" and not (warm_cache.exists() and any(warm_cache.iterdir())):
                scratch = Path(tempfile.mkdtemp(dir=root))
                run_setup(clone(scratch), mode_env(mode, scratch, warm_cache, warm_uv_home, args.system_deps))
                shutil.rmtree(scratch)
                print("warm: the caches filled by one untimed setup")
            walls = []
            for i in range(args.runs):
                scratch = Path(tempfile.mkdtemp(dir=root))
                checkout = clone(scratch)
                env = mode_env(mode, scratch, warm_cache, warm_uv_home, args.system_deps)
                r = run_setup(checkout, env)
                walls.append(float(r["wall"]))
                print(
                    f"{mode} run {i + 1}: setup {r['wall']:.1f} s wall, {r['cpu']:.1f} s CPU, load "
                    f"{r['load'][0]:.1f} -> {r['load'][1]:.1f}; steps: {r['steps']}",
                    flush=True,
                )
                if not quickstart_done:
                    q = run_quickstart(checkout, env)
                    quickstart_done = True
                    print(
                        f"{mode} run {i + 1}: quickstart {q['wall']:.1f} s wall (setup already done), load "
                        f"{q['load'][0]:.1f} -> {q['load'][1]:.1f}; {q['finished']}; {' | '.join(q['success'])}",
                        flush=True,
                    )
                    print(
                        f"clone to learned policy: {r['wall'] + q['wall']:.0f} s ({mode} setup + quickstart)"
                    )
                shutil.rmtree(scratch)
            medians[mode] = statistics.median(walls)
        for mode, median in medians.items():
            print(f"{mode}: median setup {median:.1f} s over {args.runs} run(s), ratio to the {SETUP_GOAL_S:.0f} s goal "
                  f"{median / SETUP_GOAL_S:.2f}")  # fmt: skip
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
        else:
            for child in root.iterdir():
                shutil.rmtree(child, ignore_errors=True)
    return 0


def _head() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
