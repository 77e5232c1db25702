"""How a run ends when a worker fails for good or the process is told to stop, and how it starts again.

A worker that does not answer within `cluster.worker_timeout_s` (`worker_start_timeout_s` while it starts), a node
that left the Ray cluster, a worker that died more often than `cluster.max_worker_restarts`: the run ends with one
line naming the worker, the phase and the last complete checkpoint in the run folder, or, while
`runner.max_restarts` allows, starts again from that checkpoint (`runner.resume_dir=auto` in the same folder) once
the cluster has its nodes again. SIGTERM (a scheduler's stop, a `kill`) stops the workers like Ctrl-C does.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vla_infra import WorkerFailure, WorkerTimeout, latest_checkpoint

#: What a worker group runs while a worker starts (`cluster.worker_start_timeout_s` bounds it).
_START_METHODS = ("start", "rendezvous", "__init__", "recover")


class Terminated(BaseException):
    """The process got SIGTERM: unwinds like Ctrl-C (`KeyboardInterrupt`), so every worker is stopped on the way."""


@contextmanager
def sigterm_stops_the_run() -> Iterator[None]:
    """SIGTERM raises `Terminated` in the main thread inside the block (the Ray backend keeps this handler when it
    starts Ray, whose own would dump a native stack and abort)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _terminated(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def last_checkpoint_text(log_dir: str | Path) -> str:
    """`last complete checkpoint: <folder>`, or that there is none yet, for the one-line messages."""
    found = latest_checkpoint(Path(log_dir) / "checkpoints")
    return f"last complete checkpoint: {found}" if found is not None else "no complete checkpoint yet"


def failure_line(exc: WorkerFailure, log_dir: str | Path) -> str:
    """One line: the failed worker, the method and phase, the timeout key when it timed out, the last checkpoint."""
    text = str(exc)
    if isinstance(exc, WorkerTimeout):
        key = "worker_start_timeout_s" if exc.method in _START_METHODS else "worker_timeout_s"
        text = text.replace(f"within {exc.timeout_s:g} s", f"within cluster.{key}={exc.timeout_s:g} s")
    return f"{text}; {last_checkpoint_text(log_dir)}"


def resumed(tc: Any) -> Any:
    """`tc` starting from the newest complete checkpoint of its own run folder (`runner.resume_dir=auto`)."""
    raw_runner = dict(tc.raw.get("runner", {}))
    raw_runner["resume_dir"] = "auto"
    raw = {**tc.raw, "runner": raw_runner}
    return dataclasses.replace(tc, runner=dataclasses.replace(tc.runner, resume_dir="auto"), raw=raw)


def run_restarting(tc: Any, run: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """`run(tc)`, started again from its last complete checkpoint after a `WorkerFailure`, at most
    `runner.max_restarts` times; the last failure propagates."""
    for restart in range(tc.runner.max_restarts + 1):
        try:
            return run(tc)
        except WorkerFailure as exc:
            if restart == tc.runner.max_restarts:
                raise
            found = latest_checkpoint(Path(tc.log_dir) / "checkpoints")
            print(
                f"[restart] {restart + 1} of runner.max_restarts={tc.runner.max_restarts} after: {exc}; starting "
                f"again from {found or 'the beginning (no complete checkpoint yet)'} once the cluster has its "
                f"{tc.cluster.num_nodes} node(s) (waiting up to cluster.worker_start_timeout_s="
                f"{tc.cluster.worker_start_timeout_s:g} s)",
                flush=True,
            )
            tc = resumed(tc)
    raise AssertionError("unreachable")  # pragma: no cover
