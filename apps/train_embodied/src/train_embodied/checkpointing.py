"""Run checkpoints: `<log_dir>/checkpoints/global_step_<N>/` after training iteration N (`RunState.iteration`),
written atomically by vla_infra with a sha256 of every file; which one a run starts from and when it saves.

`runner.resume_dir` may name one checkpoint folder, a `checkpoints/` folder or a run folder: the newest complete
and intact checkpoint inside is used (a damaged one is skipped with a warning naming the file). `auto` resumes
the newest run folder of the same experiment (`runner.logger.log_path/experiment_name/*`, or
`runner.logger.log_dir` when it is set) that holds a checkpoint, and starts a fresh run when there is none, so
rerunning the same command after a crash continues it.

Before anything is built, `train_embodied.preflight` reads the chosen checkpoint's headers and state files (a file
that is not what its name says is one line) and, for a policy built from its settings, compares every tensor's
shape with the policy the run would build (a checkpoint of another model size names the tensor). Checkpoints are
read without pickle (`vla_infra`: JSON and safetensors only).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from train_embodied.run_folder import write_atomic
from train_embodied.run_state import RunState
from vla_infra import (
    COMPLETE_MARKER,
    MANIFEST,
    checkpoint_dir,
    checkpoint_problem,
    latest_checkpoint,
    phase,
)

AUTO = "auto"


class ResumeError(ValueError):
    """`runner.resume_dir` names no usable checkpoint; the message is one line naming the key and the folder."""


def _step(path: Path) -> int:
    tail = path.name.removeprefix("global_step_")
    return int(tail) if tail.isdigit() else -1


def find_latest_checkpoint(path: str | Path, skipped: list[str] | None = None) -> Path:
    """The checkpoint folder `path` names, or the newest intact `global_step_N` below it (or below `checkpoints/`);
    newer damaged or incomplete ones passed over add a line to `skipped`.

    Raises:
        ResumeError: `path` is missing, is not a run folder, or holds no complete and intact checkpoint.
    """
    root = Path(path)
    bad = f"runner.resume_dir={str(path)!r} is invalid:"
    if not root.exists():
        raise ResumeError(f"{bad} no such folder")
    if not root.is_dir():
        raise ResumeError(f"{bad} a file, not a run folder or a checkpoint folder")
    if (root / COMPLETE_MARKER).exists() or (root / MANIFEST).exists() or _step(root) >= 0:  # one checkpoint
        problem = checkpoint_problem(root)
        if problem is not None:
            raise ResumeError(f"{bad} {problem}")
        return root
    base = root / "checkpoints" if (root / "checkpoints").is_dir() else root
    found = latest_checkpoint(base, verify=True, skipped=skipped)
    if found is not None:
        return found
    steps = [p for p in base.glob("global_step_*") if _step(p) >= 0]
    if steps:
        newest = max(steps, key=_step)
        raise ResumeError(
            f"{bad} none of its {len(steps)} checkpoint(s) is complete and intact (newest: {checkpoint_problem(newest)})"
        )
    raise ResumeError(
        f"{bad} not a run folder (no checkpoints/global_step_N inside); give the runner.logger.log_dir of an "
        f"earlier run, one of its checkpoint folders, or '{AUTO}'"
    )


def find_run_to_resume(log_path: str | Path, experiment_name: str) -> Path | None:
    """The newest run folder `log_path/experiment_name/<timestamp>` holding a complete checkpoint, or None."""
    base = Path(log_path) / experiment_name
    if not base.is_dir():
        return None
    runs = [p for p in base.iterdir() if p.is_dir() and latest_checkpoint(p / "checkpoints") is not None]
    return max(runs, key=lambda p: p.stat().st_mtime, default=None)


def resume_checkpoint(
    resume_dir: str | None, log_dir: str | Path, *, skipped: list[str] | None = None
) -> Path | None:
    """The checkpoint a run starts from: None for a fresh start (no `resume_dir`, or `auto` with nothing saved).
    Each newer checkpoint passed over (interrupted save, damaged file) is a line added to `skipped`, or printed
    without it."""
    if not resume_dir:
        return None
    passed_over: list[str] = []
    if resume_dir == AUTO:
        found = latest_checkpoint(Path(log_dir) / "checkpoints", verify=True, skipped=passed_over)
    else:
        found = find_latest_checkpoint(resume_dir, passed_over)
    if skipped is not None:
        skipped.extend(passed_over)
    else:
        for line in passed_over:
            print(f"[resume] skipped: {line}")
    return found


def drop_metrics_after(log_dir: str | Path, step: int) -> None:
    """Remove `metrics.jsonl` rows logged after `step`: a run resumed in its own folder logs them again."""
    path = Path(log_dir) / "metrics.jsonl"
    if not path.is_file():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            if int(json.loads(line)["step"]) <= step:
                kept.append(line)
        except (ValueError, KeyError, TypeError):  # a line cut short by the crash
            continue
    write_atomic(path, "".join(f"{line}\n" for line in kept))


def choose_resume(resume_dir: str | None, log_dir: str | Path) -> Path | None:
    """The checkpoint a training run starts from (`resume_checkpoint`), with the run folder's `metrics.jsonl` made
    to match it: a run resumed in its own folder logs the iterations after the checkpoint again, so their rows are
    dropped; `auto` with nothing saved starts over and drops every row."""
    found = resume_checkpoint(resume_dir, log_dir)
    if found is not None and found.parent.parent.resolve() == Path(log_dir).resolve():
        drop_metrics_after(log_dir, _step(found))
    elif found is None and resume_dir:
        drop_metrics_after(log_dir, -1)
    return found


def should_save(save_interval: int, iteration: int) -> bool:
    """Whether the run saves a checkpoint after training iteration `iteration` (1-based; `runner.save_interval`,
    -1: only the final one, which the runner saves after the last iteration)."""
    return save_interval > 0 and iteration % save_interval == 0


def save_run_checkpoint(log_dir: str | Path, actor: Any, state: RunState) -> Path:
    """Save the actor (model, optimizer) and the trainer `state` after `state.iteration` iterations."""
    path = checkpoint_dir(Path(log_dir) / "checkpoints", state.iteration)
    if (
        checkpoint_problem(path) is None
    ):  # already saved after this iteration (save_interval hit the last one)
        return path
    with phase("checkpoint"):
        return Path(actor.save_checkpoint(str(path), state.to_dict()))


def load_run_checkpoint(path: Path, actor: Any) -> RunState:
    """Restore the actor from `path`; returns the trainer state saved with it."""
    with phase("resume"):
        return RunState.from_dict(actor.load_checkpoint(str(path)))
