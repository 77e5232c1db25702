"""Chaos campaign: a PPO run of `metaworld_ppo_tiny_cpu` survives simulator kills and a trainer SIGKILL.

    python benchmarks/chaos.py --iterations 40 --kills 20       # the recorded figure
    python benchmarks/chaos.py --fast                           # 4 iterations, 3 kills, no run 2 (a test)
    python benchmarks/chaos.py --backend ray --actor-kills 4    # Ray: rollout / env actors SIGKILLed instead

Three runs of the same command (`vla-train metaworld_ppo_tiny_cpu`, local backend, small CPU settings, a
checkpoint every iteration, seed 0):

1. reference: uninterrupted.
2. resume only: the trainer SIGKILLed at a random moment after its first checkpoint, then the same command with
   `runner.resume_dir=auto`; its metrics must equal the reference's (timings aside).
3. chaos: `--kills` SIGKILLs of simulator worker processes at random moments while training runs (steps, resets,
   restarts' start-ups, updates), plus one trainer SIGKILL halfway and the automatic resume.

Prints the kills delivered and survived, the episodes the simulator kills truncated (`env/lost_episodes`: each
ended as truncated and counted; no other episode is lost: the env steps equal the reference's), whether run 2's and
run 3's final metrics equal the reference's (run 3's cannot: truncated episodes change the trajectories), and the
wall-time overhead of run 3 over run 1. Exit status 0 when every kill was survived and run 2 matches.

With `--backend ray --actor-kills N` it runs the reference, then the same run with N SIGKILLs of rollout and
training-env Ray actors (read from the run's `worker_pids.json`) at random moments after the first logged
iteration; each is replaced and the run goes on. Exit status 0 when the run completes, every kill is counted in
`worker_restarts` and the env steps equal the reference's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CONFIG = "metaworld_ppo_tiny_cpu"
SMALL = [  # 4 envs in 2 simulator processes, 32 px, 16 env steps per env per iteration, a short eval
    "env.train.image_size=32",
    "env.eval.image_size=32",
    "actor.model.image_size=32",
    "env.train.num_envs=4",
    "env.train.envs_per_worker=2",
    "env.train.max_steps_per_rollout_epoch=16",
    "env.train.reward_mode=dense",
    "env.eval.num_envs=2",
    "env.eval.envs_per_worker=1",
    "env.eval.num_episodes=2",
    "env.eval.max_episode_steps=8",
    "actor.micro_batch_size=16",
    "actor.global_batch_size=32",
    "algorithm.update_epoch=2",
    "runner.eval_greedy=false",
    "runner.progress_bar=false",
    "runner.save_interval=1",
    "runner.logger.logger_backends=[console]",
    # a kill is noticed at once (EOF); the timeouts only bound a hang
    "env.train.worker_timeout_s=30",
    "env.eval.worker_timeout_s=30",
]


def children(pid: int) -> list[int]:
    """Direct children of `pid` (Linux /proc)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, their children, ...)."""
    out, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


def simulator_pids(trainer: int) -> list[int]:
    """Simulator worker processes of a trainer: the children of the multiprocessing forkservers below it (in
    the trainer itself on the local backend, in the env actors on the Ray backend)."""
    pids = []
    for proc in descendants(trainer):
        try:
            cmdline = Path(f"/proc/{proc}/cmdline").read_bytes()
        except OSError:
            continue
        if b"forkserver" in cmdline:
            pids += children(proc)
    return pids


BACKEND = ["cluster.backend=local"]


def command(iterations: int, log_path: Path) -> list[str]:
    return [
        sys.executable, "-m", "train_embodied.cli", CONFIG, *SMALL, *BACKEND, f"runner.max_epochs={iterations}",
        "runner.resume_dir=auto", f"runner.logger.log_path={log_path}",
    ]  # fmt: skip


FAULT_METRICS = ("env/worker_restarts", "env/lost_episodes", "env/restart_time_s")


def metrics_by_step(run_dir: Path) -> dict[int, dict[str, float]]:
    """step -> every metric logged at that step; wall-clock figures and the fault counters themselves left out."""
    out: dict[int, dict[str, float]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        kept = {k: v for k, v in row.items() if not k.startswith("time/") and k not in FAULT_METRICS}
        out.setdefault(int(row["step"]), {}).update(kept)
    return out


def fault_totals(rows: list[dict[str, float]]) -> dict[str, float]:
    """The largest cumulative `env/worker_restarts` / `env/lost_episodes` in rows logged by one process."""
    keys = ("env/worker_restarts", "env/lost_episodes")
    return {k: max((r.get(k, 0.0) for r in rows), default=0.0) for k in keys}


def rows(run_dir: Path) -> list[dict[str, float]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class Trainer:
    """One `vla-train` process with its output in a file."""

    def __init__(self, cmd: list[str], log: Path) -> None:
        self.log = log.open("a")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self.log.close()

    def sigkill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(60)
        time.sleep(0.5)  # the simulator processes see their pipe close and exit
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # whatever of its session is left
        self.log.close()


def wait_for_checkpoint(runs: Path, trainer: Trainer, timeout: float = 600) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline and trainer.proc.poll() is None:
        if list(runs.glob("*/checkpoints/global_step_*/COMPLETE")):
            return True
        time.sleep(0.05)
    return False


def reference_run(iterations: int, root: Path) -> tuple[Path, float]:
    runs = root / "reference"
    t0 = time.time()
    trainer = Trainer(command(iterations, runs), root / "reference.log")
    assert trainer.wait(1800) == 0, (root / "reference.log").read_text()[-3000:]
    return next((runs / CONFIG).iterdir()), time.time() - t0


def resume_only_run(iterations: int, root: Path, rng: random.Random) -> tuple[Path, float]:
    runs = root / "resume_only"
    t0 = time.time()
    first = Trainer(command(iterations, runs), root / "resume_only.log")
    assert wait_for_checkpoint(runs / CONFIG, first), "no checkpoint before the run ended"
    time.sleep(rng.uniform(0.0, 1.0))
    first.sigkill()
    second = Trainer(command(iterations, runs), root / "resume_only.log")
    assert second.wait(1800) == 0, (root / "resume_only.log").read_text()[-3000:]
    return next((runs / CONFIG).iterdir()), time.time() - t0


def trained_past(runs: Path, step: int) -> bool:
    """Whether the run under `runs` has logged a training iteration after iteration `step`."""
    return any(
        "train/loss" in r and r["step"] > step
        for run_dir in runs.glob("*")
        if run_dir.is_dir()
        for r in rows(run_dir)
    )


def chaos_run(iterations: int, kills: int, root: Path, rng: random.Random, interval: float) -> dict:
    """Kills land while training is under way: the first half once the first iteration is logged, then the
    trainer is SIGKILLed and rerun, and the second half once the rerun has logged an iteration of its own."""
    runs = root / "chaos"
    log = root / "chaos.log"
    t0 = time.time()
    armed = threading.Event()
    state = {"trainer": Trainer(command(iterations, runs), log), "delivered": 0, "stop": False}

    def killer() -> None:
        while not state["stop"] and state["delivered"] < kills:
            armed.wait()
            time.sleep(rng.uniform(0.3 * interval, 1.7 * interval))
            trainer = state["trainer"]
            pids = simulator_pids(trainer.proc.pid) if trainer.proc.poll() is None and armed.is_set() else []
            if not pids:
                continue
            try:
                os.kill(rng.choice(pids), signal.SIGKILL)
                state["delivered"] += 1
            except ProcessLookupError:
                pass

    def arm_after(step: int, trainer: Trainer) -> None:
        while not trained_past(runs / CONFIG, step) and trainer.proc.poll() is None:
            time.sleep(0.1)
        armed.set()

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    first = state["trainer"]
    arm_after(0, first)
    assert wait_for_checkpoint(runs / CONFIG, first), (log.read_text()[-3000:], "no checkpoint")
    while state["delivered"] < kills // 2 and first.proc.poll() is None:
        time.sleep(0.05)
    armed.clear()
    trainer_killed = first.proc.poll() is None
    before_resume: list[dict[str, float]] = []
    if trainer_killed:
        first.sigkill()
        run_dir = next((runs / CONFIG).iterdir())
        before_resume = rows(run_dir)  # read before the resumed run drops the rows after its checkpoint
        saved = max(int(p.name.removeprefix("global_step_")) for p in run_dir.glob("checkpoints/global_step_*")
                    if (p / "COMPLETE").exists())  # fmt: skip
        state["trainer"] = Trainer(command(iterations, runs), log)
        time.sleep(2.0)  # the rerun drops the rows logged after its checkpoint before it trains
        arm_after(saved, state["trainer"])
    armed.set()
    code = state["trainer"].wait(1800)
    state["stop"] = True
    thread.join()
    wall = time.time() - t0
    run_dir = next((runs / CONFIG).iterdir())
    text = log.read_text()
    resumed_at = None
    for line in text.splitlines():
        if line.startswith("[resume] from "):
            resumed_at = int(line.rsplit("global_step_", 1)[-1].split()[0])
    after = [r for r in rows(run_dir) if resumed_at is None or r["step"] > resumed_at]
    first_totals = fault_totals(before_resume) if trainer_killed else {}
    last_totals = fault_totals(after if trainer_killed else rows(run_dir))
    return {
        "exit_code": code,
        "error": "" if code == 0 else text[-3000:],
        "delivered": state["delivered"],
        "trainer_killed": trainer_killed,
        "resumed_at": resumed_at,
        # every restart attempt logs one "env worker ... died or hung" warning (the metrics miss the ones after
        # the last logged iteration of each process)
        "worker_restarts": float(text.count(") died or hung: ")),
        "lost_episodes": first_totals.get("env/lost_episodes", 0.0) + last_totals["env/lost_episodes"],
        "run_dir": run_dir,
        "wall": wall,
    }


def actor_pids(run_dir: Path) -> dict[str, list[int]]:
    """Worker process ids by group from the run's `worker_pids.json` (rewritten after each restart)."""
    try:
        return json.loads((run_dir / "worker_pids.json").read_text())
    except (OSError, ValueError):
        return {}


def actor_chaos_run(iterations: int, kills: int, root: Path, rng: random.Random, interval: float) -> dict:
    """Ray backend: `kills` SIGKILLs of rollout and training-env Ray actors (chosen at random) at random moments
    once the first iteration is logged; each dead actor is replaced (`cluster.max_worker_restarts`)."""
    runs = root / "actor_chaos"
    log = root / "actor_chaos.log"
    t0 = time.time()
    cmd = [*command(iterations, runs), f"cluster.max_worker_restarts={kills}"]
    trainer = Trainer(cmd, log)
    state = {"delivered": 0, "stop": False, "by_group": {}}

    def killer() -> None:
        while not trained_past(runs / CONFIG, 0) and trainer.proc.poll() is None:
            time.sleep(0.1)
        while not state["stop"] and state["delivered"] < kills and trainer.proc.poll() is None:
            time.sleep(rng.uniform(0.3 * interval, 1.7 * interval))
            run_dirs = [d for d in (runs / CONFIG).glob("*") if d.is_dir()]
            pids = actor_pids(run_dirs[0]) if run_dirs else {}
            targets = [
                (g, p) for g, ps in pids.items() if g == "rollout" or g.startswith("env_train") for p in ps
            ]
            if not targets or trainer.proc.poll() is not None:
                continue
            group, pid = rng.choice(targets)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            state["delivered"] += 1
            state["by_group"][group] = state["by_group"].get(group, 0) + 1
            # the next kill waits for the replacement to be written: a process id is never killed twice
            deadline = time.time() + 120
            while time.time() < deadline and any(pid in ps for ps in actor_pids(run_dirs[0]).values()):
                if trainer.proc.poll() is not None:
                    return
                time.sleep(0.1)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    code = trainer.wait(1800)
    state["stop"] = True
    thread.join()
    run_dir = next((runs / CONFIG).iterdir())
    logged = rows(run_dir)
    return {
        "exit_code": code,
        "error": "" if code == 0 else log.read_text()[-3000:],
        "delivered": state["delivered"],
        "by_group": state["by_group"],
        "actor_restarts": max((r.get("cluster/actor_restarts", 0.0) for r in logged), default=0.0),
        "lost_episodes": max((r.get("env/lost_episodes", 0.0) for r in logged), default=0.0),
        "summary_restarts": json.loads((run_dir / "summary.json").read_text()).get("worker_restarts")
        if code == 0
        else None,
        "run_dir": run_dir,
        "wall": time.time() - t0,
    }


def main_actor_kills(args: argparse.Namespace, root: Path, rng: random.Random) -> int:
    """`--actor-kills N`: an uninterrupted Ray run, then the same run with N rollout / env actor SIGKILLs."""
    ref_dir, ref_wall = reference_run(args.iterations, root)
    chaos = actor_chaos_run(args.iterations, args.actor_kills, root, rng, args.interval)
    ref = metrics_by_step(ref_dir)
    chaos_metrics = metrics_by_step(chaos["run_dir"]) if chaos["exit_code"] == 0 else {}
    env_steps_ref = max(r.get("env/env_steps", 0.0) for r in ref.values())
    env_steps_chaos = max((r.get("env/env_steps", 0.0) for r in chaos_metrics.values()), default=0.0)
    survived = chaos["delivered"] if chaos["exit_code"] == 0 else 0
    print(f"config {CONFIG}, {args.iterations} iterations, ray backend, seed {args.seed}")
    groups = ", ".join(f"{g} {n}" for g, n in sorted(chaos["by_group"].items()))
    print(
        f"Ray actor kills: {chaos['delivered']} delivered ({groups or 'none'}), {survived} survived; "
        f"run exit code {chaos['exit_code']}"
    )
    print(
        f"actor restarts: {chaos['summary_restarts']} (summary.json), {chaos['actor_restarts']:.0f} logged "
        f"(cluster/actor_restarts at the last logged iteration); episodes lost with env actors "
        f"(env/lost_episodes): {chaos['lost_episodes']:.0f}; env steps {env_steps_chaos:.0f} vs "
        f"{env_steps_ref:.0f} uninterrupted"
    )
    print(
        f"wall time: uninterrupted {ref_wall:.1f} s, actor kills {chaos['wall']:.1f} s: overhead "
        f"{chaos['wall'] / ref_wall - 1:+.0%}"
    )
    if chaos["exit_code"] != 0:
        print(chaos["error"], file=sys.stderr)
    restarts_ok = chaos["summary_restarts"] == chaos["delivered"]
    return 0 if chaos["exit_code"] == 0 and restarts_ok and env_steps_chaos == env_steps_ref else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument(
        "--kills", type=int, default=20, help="simulator SIGKILLs (the trainer is killed once)"
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=3.0,
        help="mean seconds between simulator kills (a MetaWorld worker takes 1-4 s to start on 2 busy cores: "
        "much faster kills than that leave a simulator no time to start, and the run ends by design)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=("local", "ray"), default="local", help="cluster.backend")
    parser.add_argument(
        "--fast",
        action="store_true",
        help="4 iterations, 3 kills, no resume-only run (tests/test_e2e_train_local.py has it)",
    )
    parser.add_argument(
        "--actor-kills",
        type=int,
        default=0,
        help="Ray backend: instead of the simulator campaign, SIGKILL this many rollout / env Ray actors at "
        "random moments (each is replaced: cluster.max_worker_restarts) and compare with an uninterrupted run",
    )
    parser.add_argument("--keep", help="keep the runs in this folder (default: a temporary one, removed)")
    args = parser.parse_args(argv)
    if args.fast:
        args.iterations, args.kills, args.interval = 4, 3, 1.0
    if args.actor_kills > 0 and args.backend != "ray":
        parser.error("--actor-kills needs --backend ray")
    BACKEND[:] = [f"cluster.backend={args.backend}"]
    rng = random.Random(args.seed)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="vla-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        if args.actor_kills > 0:
            return main_actor_kills(args, root, rng)
        ref_dir, ref_wall = reference_run(args.iterations, root)
        resume_dir = None if args.fast else resume_only_run(args.iterations, root, rng)[0]
        chaos = chaos_run(args.iterations, args.kills, root, rng, args.interval)
        ref = metrics_by_step(ref_dir)
        resume_equal = resume_dir is None or metrics_by_step(resume_dir) == ref
        chaos_metrics = metrics_by_step(chaos["run_dir"]) if chaos["exit_code"] == 0 else {}
        chaos_equal = chaos_metrics == ref
        env_steps_ref = max(r.get("env/env_steps", 0.0) for r in ref.values())
        env_steps_chaos = max((r.get("env/env_steps", 0.0) for r in chaos_metrics.values()), default=0.0)
        survived = chaos["delivered"] if chaos["exit_code"] == 0 else 0
        print(f"config {CONFIG}, {args.iterations} iterations, {args.backend} backend, seed {args.seed}")
        print(
            f"simulator kills: {chaos['delivered']} delivered, {survived} survived; trainer SIGKILL: "
            f"{'yes' if chaos['trainer_killed'] else 'no (the run ended first)'}, resumed at iteration "
            f"{chaos['resumed_at']} with runner.resume_dir=auto; run exit code {chaos['exit_code']}"
        )
        print(
            f"simulator restarts: {chaos['worker_restarts']:.0f}; episodes truncated by the kills "
            f"(env/lost_episodes, each ended as truncated): {chaos['lost_episodes']:.0f}; env steps "
            f"{env_steps_chaos:.0f} vs {env_steps_ref:.0f} uninterrupted, so other transitions lost: "
            f"{'0' if env_steps_chaos == env_steps_ref else 'SOME'}"
        )
        if resume_dir is not None:
            print(f"trainer SIGKILL + auto resume, no simulator kills: final metrics equal the uninterrupted "
                  f"run's: {resume_equal}")  # fmt: skip
        differ = sorted({k for s in ref for k in ref[s] if chaos_metrics.get(s, {}).get(k) != ref[s][k]})
        print(f"chaos run: final metrics equal the uninterrupted run's: {chaos_equal}"
              + (f" (differ: {', '.join(differ[:6])}{', ...' if len(differ) > 6 else ''})" if differ else ""))  # fmt: skip
        print(
            f"wall time: uninterrupted {ref_wall:.1f} s, chaos {chaos['wall']:.1f} s: overhead "
            f"{chaos['wall'] / ref_wall - 1:+.0%}"
        )
        if chaos["exit_code"] != 0:
            print(chaos["error"], file=sys.stderr)
        return 0 if chaos["exit_code"] == 0 and resume_equal and env_steps_chaos == env_steps_ref else 1
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
