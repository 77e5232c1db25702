"""`WorkerPool`: the simulator workers of a `VectorEnv`, one per slice of env rows, and their replacement.

A worker that dies or hangs (EOF, dead pipe or `worker_timeout_s`) is killed and started again, with a backoff
between attempts; a replacement that dies while it builds its simulators is replaced again.
`MAX_CONSECUTIVE_FAILURES` failures in a row for the same worker raise `SimulatorUnavailable` naming the simulator,
the rows and the last error. The pool counts restarts and the seconds spent restarting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from vla_envs.base import Obs
from vla_envs.config import EnvConfig
from vla_envs.sim import SimSpec
from vla_envs.workers import LocalWorker, ProcessWorker, SimulatorUnavailable, WorkerDied, WorkerError

logger = logging.getLogger(__name__)

#: Failed (re)starts of one worker in a row (it died, hung, or its simulators failed to build) that end the run.
#: With the backoff below the attempts span about 8 s plus the start-ups, so a worker killed again and again
#: while it starts (an operator or an OOM killer every few seconds) is given time; a simulator that cannot
#: start at all ends the run within seconds.
MAX_CONSECUTIVE_FAILURES = 5
#: Seconds before the k-th retry of a failed restart: RESTART_BACKOFF_S * 2**(k-1), at most MAX_BACKOFF_S.
RESTART_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0


def backoff_s(attempt: int) -> float:
    """Seconds to wait before the `attempt`-th retry of a failed restart (attempt >= 1)."""
    return min(RESTART_BACKOFF_S * 2 ** (attempt - 1), MAX_BACKOFF_S)


def _last_line(reason: str) -> str:
    lines = [line for line in reason.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else reason


class WorkerPool:
    """One worker per slice of env rows: subprocess workers (`cfg.envs_per_worker > 0`) or one in-process worker.

    Args:
        cfg: The env config (start method, timeouts).
        spec: Adapter description (builder reference) each worker builds its simulators from.
        slices: The env rows of each worker.
        describe: Names worker `wid`'s simulator, tasks and rows in a `SimulatorUnavailable` message.
    """

    def __init__(
        self, cfg: EnvConfig, spec: SimSpec, slices: list[list[int]], describe: Callable[[int], str]
    ) -> None:
        self.cfg = cfg
        self.spec = spec
        self.slices = slices
        self.describe = describe
        self.workers: list[Any] = []
        self.restarts = 0
        self.restart_time_s = 0.0
        self.aborted = False  # abort(): no worker is (re)started any more

    def start(self) -> None:
        """Build every worker's simulators (in parallel for subprocess workers) and wait until all are ready."""
        cfg, spec = self.cfg, self.spec
        for wid, rows in enumerate(self.slices):
            if cfg.envs_per_worker == 0:
                self.workers.append(LocalWorker(wid, cfg, spec, rows))
            else:
                worker = ProcessWorker(wid, cfg, spec, rows)
                worker.start()
                self.workers.append(worker)
        for worker in list(self.workers):  # built in parallel; wait for every "ready"
            if isinstance(worker, ProcessWorker):
                try:
                    worker.recv(cfg.worker_start_timeout_s)
                except WorkerDied as exc:  # killed or crashed while building: start it again
                    self._start_again(worker.worker_id, str(exc))

    def stop(self) -> None:
        """Stop every worker (their processes and simulators go away); `start()` builds them again."""
        for worker in self.workers:
            worker.close()
        self.workers = []

    def abort(self) -> None:
        """Kill every worker process now (callable from another thread) and start none again: a call waiting for
        one of them fails with `SimulatorUnavailable`."""
        self.aborted = True
        for worker in list(self.workers):
            worker.kill()

    def pids(self) -> list[int]:
        """Process ids of the workers (this process's id for an in-process one)."""
        return [int(w.pid) for w in self.workers if w.pid is not None]

    def revive(self, wid: int, ids: list[int], held_obs: dict[int, Any] | None, reason: str) -> Obs:
        """Replace worker `wid` and reset its rows to `ids` (rows in `held_obs` stay ended, showing that obs);
        returns its obs.

        Any failure on the way (the new process dies or hangs while it builds its simulators or resets, or the
        build raises) is retried after a backoff; `MAX_CONSECUTIVE_FAILURES` failures in a row raise
        `SimulatorUnavailable` naming the simulator, the rows and the last error.
        """
        t0 = time.monotonic()
        try:
            for attempt in range(MAX_CONSECUTIVE_FAILURES):
                if attempt > 0:
                    time.sleep(backoff_s(attempt))
                try:
                    self._restart(wid, reason)
                    self.workers[wid].send(*(("reset_hold", (ids, held_obs)) if held_obs else ("reset", ids)))
                    return self.workers[wid].recv(self.cfg.worker_timeout_s)
                except WorkerDied as exc:
                    reason = str(exc)
        finally:
            self.restart_time_s += time.monotonic() - t0
        raise SimulatorUnavailable(
            f"{self.describe(wid)} failed {MAX_CONSECUTIVE_FAILURES} times in a row (died, hung or could not "
            f"start); last error: {_last_line(reason)}"
        )

    def _start_again(self, wid: int, reason: str) -> None:
        """Worker `wid` died before its first "ready": start it again (bounded, with backoff, as `revive`)."""
        t0 = time.monotonic()
        try:
            for attempt in range(1, MAX_CONSECUTIVE_FAILURES):
                time.sleep(backoff_s(attempt))
                try:
                    self._restart(wid, reason)
                    return
                except WorkerDied as exc:
                    reason = str(exc)
        finally:
            self.restart_time_s += time.monotonic() - t0
        worker = self.workers[wid]
        worker.kill()
        exited_with_error = worker.exitcode is not None and worker.exitcode > 0  # not a signal, not a hang
        hint = (
            f"; with start_method={self.cfg.start_method!r} the main script must be import-safe (guard it "
            "with `if __name__ == '__main__':`), see the worker's stderr"
            if exited_with_error and self.cfg.start_method != "fork"
            else ""
        )
        raise SimulatorUnavailable(
            f"{self.describe(wid)} failed to start {MAX_CONSECUTIVE_FAILURES} times in a row; last error: "
            f"{_last_line(reason)}{hint}"
        )

    def _restart(self, wid: int, reason: str) -> None:
        """Kill worker `wid` and start a replacement; raise WorkerDied if it dies, hangs or fails to build."""
        if self.aborted:
            raise SimulatorUnavailable(f"{self.describe(wid)} was stopped (the env was aborted)")
        old = self.workers[wid]
        old.kill()
        logger.warning(
            "env worker %d (pid %s, rows %s) died or hung: exit code %s (%s); restarting it and resetting its envs",
            wid, old.pid, old.rows, old.exitcode, reason.strip().splitlines()[-1] if reason.strip() else reason,
        )  # fmt: skip
        self.restarts += 1
        new = ProcessWorker(wid, self.cfg, self.spec, old.rows)
        self.workers[wid] = new  # before start: a failed start is killed by the next attempt or by close()
        new.start()
        try:
            new.recv(self.cfg.worker_start_timeout_s)
        except WorkerError as exc:  # the simulators raised while building: a failed start, retried
            raise WorkerDied(str(exc)) from exc
