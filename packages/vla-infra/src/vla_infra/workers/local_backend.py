"""Embedded backend: every worker lives in the driver process (simulators still in subprocesses).

Each worker owns one thread, so calls on one worker run in order (like a Ray actor) while calls on
different workers overlap; a blocking call without a timeout on an idle worker runs directly in the calling
thread, which keeps the per-call cost at a few microseconds. A call with a timeout runs on the worker's thread
and the caller waits at most that long; a worker whose call did not return is stopped by
:meth:`~vla_infra.workers.Worker.abort` and its thread (a daemon) is left behind, so it never blocks the exit.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from vla_infra.channel import LocalChannel
from vla_infra.placement import ProcessPlacement
from vla_infra.workers.backend import Backend, WorkerHandle
from vla_infra.workers.failures import WorkerTimeout
from vla_infra.workers.worker import Worker, WorkerInfo, construct_worker, find_free_port


class _CallThread:
    """One daemon thread running queued functions in order (started on first use)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[tuple[Future, Callable[[], Any]] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()
        self._queue.put((future, fn))
        return future

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            future, fn = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

    def stop(self, *, wait: bool) -> None:
        """Let the thread end after the queued calls; ``wait``: join it."""
        if self._thread is None:
            return
        self._queue.put(None)
        if wait:
            self._thread.join()


class LocalWorkerHandle(WorkerHandle):
    """An in-process worker with its own call thread."""

    def __init__(self, worker: Worker | None, name: str) -> None:
        self.worker = worker
        self._thread = _CallThread(name)
        self._lock = threading.Lock()  # held while a call runs, so inline and queued calls never overlap
        self._pending = 0
        self._pending_lock = threading.Lock()

    def _run(self, fn: Callable[[], Any], *, locked: bool = False) -> Any:
        if not locked:
            self._lock.acquire()
        try:
            return fn()
        finally:
            self._lock.release()
            with self._pending_lock:
                self._pending -= 1

    def _method(self, method: str, args: tuple, kwargs: dict) -> Callable[[], Any]:
        return lambda: getattr(self.worker, method)(*args, **kwargs)

    def _submit(self, fn: Callable[[], Any]) -> Future:
        with self._pending_lock:
            self._pending += 1
        return self._thread.submit(lambda: self._run(fn))

    def submit(self, method: str, args: tuple, kwargs: dict) -> Future:
        return self._submit(self._method(method, args, kwargs))

    def call(self, method: str, args: tuple, kwargs: dict, timeout: float | None = None) -> Any:
        if timeout is not None:  # on the worker's thread: this one must be free to give up
            return self.submit(method, args, kwargs).result(timeout)
        with self._pending_lock:
            idle = self._pending == 0
            if idle:
                # Nothing queued before us: take the worker now (it is free: a call releases the lock
                # before it leaves the pending count) and run here, which keeps the call order and
                # skips a thread hop.
                self._pending += 1
                self._lock.acquire()
        if idle:
            return self._run(self._method(method, args, kwargs), locked=True)
        return self.submit(method, args, kwargs).result()

    def shutdown(self, *, force: bool = False) -> None:
        if force:  # a call never returned: stop what the worker runs elsewhere, leave its thread
            abort = getattr(self.worker, "abort", None)
            if callable(abort):
                abort()
            self._thread.stop(wait=False)
            return
        self._thread.stop(wait=True)
        close = getattr(self.worker, "close", None)
        if callable(close):
            close()


class LocalBackend(Backend):
    """Runs workers in the current process; the default backend.

    Devices: a process placed on a GPU gets ``cuda:<local_gpu>`` (no isolation is possible inside one
    process); CPU placements get ``cpu``. Only node rank 0 exists locally.
    """

    name = "local"

    def launch(
        self,
        worker_cls: type[Worker],
        placements: Sequence[ProcessPlacement],
        *,
        group: str,
        args: tuple,
        kwargs: dict,
        timeout_s: float | None = None,
    ) -> list[WorkerHandle]:
        for p in placements:
            if p.node_rank != 0:
                raise ValueError(
                    f"LocalBackend runs on one machine, but {group} rank {p.rank} is placed on node "
                    f"{p.node_rank}; use RayBackend for cluster.num_nodes > 1"
                )
        port = find_free_port()
        handles: list[LocalWorkerHandle] = []
        try:
            for p in placements:
                info = WorkerInfo.from_placement(
                    p,
                    group=group,
                    device="cpu" if p.local_gpu is None else f"cuda:{p.local_gpu}",
                    master_addr="127.0.0.1",
                    master_port=port,
                    backend=self.name,
                )
                handle = LocalWorkerHandle(None, f"{group}-{p.rank}")
                handles.append(handle)
                build = lambda info=info: construct_worker(worker_cls, info, args, kwargs)  # noqa: E731
                if timeout_s is None:
                    handle.worker = build()
                    continue
                try:
                    handle.worker = handle._thread.submit(build).result(timeout_s)
                except FutureTimeout:
                    raise WorkerTimeout(group, [p.rank], "__init__", timeout_s) from None
        except BaseException:
            for handle in handles:  # the workers built so far stop as at the end of a run
                if handle.worker is not None:
                    with contextlib.suppress(Exception):
                        handle.shutdown()
            raise
        return list(handles)

    def create_channel(self, *, maxsize: int = 0, name: str | None = None) -> LocalChannel:
        return LocalChannel(maxsize=maxsize, name=name)
