"""A group of workers of one class, one per placed process, called like a single object."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from vla_infra.placement import ProcessPlacement
from vla_infra.workers.backend import Backend, ResultFuture, WorkerHandle
from vla_infra.workers.dispatch import collect_outputs, dispatch_args, method_dispatch, method_restart
from vla_infra.workers.failures import NodeLost, WorkerFailure, WorkerLost, WorkerTimeout
from vla_infra.workers.worker import Worker

__all__ = ["GroupFuture", "GroupMethod", "WorkerGroup", "WorkerLost"]

logger = logging.getLogger(__name__)


class _RankCall:
    """One call on one rank: its future, and what is needed to run it again on a replacement worker."""

    def __init__(self, group: WorkerGroup, rank: int, method: str, args: tuple, kwargs: dict) -> None:
        self.group, self.rank, self.method, self.args, self.kwargs = group, rank, method, args, kwargs
        group._check_answering(rank, method)
        self.generation = group._generation[rank]  # the incarnation of the worker that got the call
        self.future: ResultFuture = group.handles[rank].submit(method, args, kwargs)

    def done(self) -> bool:
        return self.future.done()

    def result(self, timeout: float | None = None) -> Any:
        try:
            out = self.future.result(timeout)
        except Exception as exc:
            return self.group._after_failure(
                self.rank, self.generation, self.method, self.args, self.kwargs, exc, timeout
            )
        self.group._record(self.rank, self.method, self.args, self.kwargs)
        return out


class GroupFuture:
    """The pending, gathered result of one call on a worker group."""

    def __init__(self, calls: list[_RankCall], collect: str | Callable[[list[Any]], Any]) -> None:
        self._calls = calls
        self._collect = collect

    def done(self) -> bool:
        """True once every rank finished."""
        return all(c.done() for c in self._calls)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for every rank and return the gathered output (raises the first rank's error).

        A rank whose worker died is restarted and the call retried there (``WorkerGroup(max_restarts=...)``).

        Args:
            timeout: Seconds to wait for all ranks together; default the group's ``timeout_s``.

        Raises:
            WorkerTimeout: some ranks did not finish in time (it names every rank still running).
            NodeLost: a node the backend placed workers on left the cluster.
        """
        group = self._calls[0].group
        timeout = group.timeout_s if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        outputs = []
        for call in self._calls:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                outputs.append(call.result(remaining))
            except WorkerTimeout as exc:
                pending = [c.rank for c in self._calls if not c.done()] or exc.ranks
                raise group._timed_out(pending, call.method, timeout) from None
        return collect_outputs(self._collect, outputs)

    wait = result


class GroupMethod:
    """``group.<method>``: call it to run on all ranks and gather, or ``.submit(...)`` for a future."""

    def __init__(
        self, group: WorkerGroup, method: str, dispatch: str, collect: str | Callable[[list[Any]], Any]
    ) -> None:
        self._group = group
        self._method = method
        self.dispatch = dispatch
        self.collect = collect

    def submit(self, *args: Any, **kwargs: Any) -> GroupFuture:
        """Start the call on every rank (split as the method's dispatch mode says); do not wait."""
        calls = dispatch_args(self.dispatch, self._group.world_size, args, kwargs)
        return GroupFuture(
            [_RankCall(self._group, r, self._method, a, kw) for r, a, kw in calls], self.collect
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the call on every rank and return the gathered output."""
        calls = dispatch_args(self.dispatch, self._group.world_size, args, kwargs)
        if len(calls) == 1:  # a single rank runs: no need to go through futures
            rank, a, kw = calls[0]
            return collect_outputs(self.collect, [self._group._call(rank, self._method, a, kw)])
        return self.submit(*args, **kwargs).result()


def _cpu_placements(group: str, n: int) -> list[ProcessPlacement]:
    return [
        ProcessPlacement(
            component=group,
            rank=r,
            world_size=n,
            node_rank=0,
            local_gpu=None,
            global_gpu=None,
            local_rank=r,
            local_world_size=n,
            gpu_fraction=0.0,
        )
        for r in range(n)
    ]


class WorkerGroup:
    """Workers of one class placed on the processes of one component.

    Example::

        placement = resolve_placement({"env": "0:0-1", "rollout": "0"}, num_nodes=1, num_gpus_per_node=0)
        envs = WorkerGroup(MyEnvWorker, placement["env"], kwargs={"num_envs": 4})
        obs = envs.reset()                  # dispatch of MyEnvWorker.reset decides split/gather
        fut = envs.step.submit(actions)     # async: overlap with another group
        result = fut.result()

    Args:
        worker_cls: A :class:`~vla_infra.workers.Worker` subclass.
        placements: The component's processes from :func:`~vla_infra.resolve_placement`, or an int
            ``n`` for ``n`` CPU processes on node 0.
        backend: Where the workers run; default a new :class:`~vla_infra.workers.LocalBackend`.
        name: Group name (default: the placements' component, else the class name).
        args: Positional arguments of ``worker_cls.__init__`` (same for every rank).
        kwargs: Keyword arguments of ``worker_cls.__init__`` (same for every rank).
        timeout_s: Seconds the driver waits for any call of this group before it gives up with
            :class:`WorkerTimeout` naming the ranks still running; those ranks count as hung from then on: a later
            call on them raises at once and :meth:`shutdown` stops them without waiting. None (default): no
            limit. A call that fails because a node left the cluster raises :class:`NodeLost` instead (no restart
            can land on that node).
        start_timeout_s: Seconds a worker may take to start (its process, ``__init__``: a model to load,
            simulators to build) and a replacement to start and catch up; default ``timeout_s``.
        max_restarts: How many times each rank's worker may be replaced after it died (a backend that can lose
            a worker: Ray). A call that finds its worker dead (``RayActorError``) gets a new worker on the same
            placement with the same arguments; the group replays the last successful call of every method
            registered with ``replay=True`` (in the order they were made), runs :attr:`on_restart` with the
            rank, calls the worker's :meth:`~vla_infra.workers.Worker.recover`, then runs the failed call again.
            One more death than ``max_restarts`` raises :class:`WorkerLost`. Methods registered with
            ``restart=False`` (``close``) never restart a worker. 0 (default): a dead worker raises
            :class:`WorkerLost` at once.

    Attributes:
        on_restart: Optional ``callable(rank)`` run after a rank's worker was replaced and its replayed calls
            ran (the owner re-syncs what the group cannot replay, e.g. weights over a peer group).
        restarts: Restarts so far, per rank.
        hung: Ranks whose call did not finish within ``timeout_s``.
    """

    def __init__(
        self,
        worker_cls: type[Worker],
        placements: Sequence[ProcessPlacement] | int,
        *,
        backend: Backend | None = None,
        name: str | None = None,
        args: tuple = (),
        kwargs: dict[str, Any] | None = None,
        max_restarts: int = 0,
        timeout_s: float | None = None,
        start_timeout_s: float | None = None,
    ) -> None:
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
        for key, value in (("timeout_s", timeout_s), ("start_timeout_s", start_timeout_s)):
            if value is not None and not value > 0:  # also refuses NaN
                raise ValueError(f"{key} must be > 0 seconds or None, got {value}")
        if not (isinstance(worker_cls, type) and issubclass(worker_cls, Worker)):
            raise TypeError(f"worker_cls must be a subclass of vla_infra.Worker, got {worker_cls!r}")
        if isinstance(placements, int):
            if placements < 1:
                raise ValueError(f"placements must be >= 1 processes, got {placements}")
            placements = _cpu_placements(name or worker_cls.__name__, placements)
        placements = list(placements)
        if not placements:
            raise ValueError(f"WorkerGroup({worker_cls.__name__}) needs at least one placement")
        if [p.rank for p in placements] != list(range(len(placements))):
            raise ValueError("placements must be in rank order 0..n-1 (as resolve_placement returns them)")
        if backend is None:
            from vla_infra.workers.local_backend import LocalBackend

            backend = LocalBackend()
        self.worker_cls = worker_cls
        self.placements = placements
        self.backend = backend
        self.name = name or placements[0].component or worker_cls.__name__
        self._args, self._kwargs = tuple(args), dict(kwargs or {})
        self.max_restarts = max_restarts
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s if start_timeout_s is not None else timeout_s
        self.hung: set[int] = set()
        self.on_restart: Callable[[int], None] | None = None
        self.restarts = [0] * len(placements)
        self._generation = [0] * len(placements)
        # per rank: method -> (args, kwargs) of its last successful replayed call, oldest first
        self._replay: list[dict[str, tuple[tuple, dict]]] = [{} for _ in placements]
        self._restart_lock = threading.RLock()  # on_restart may call the group again (re-entrant)
        self.handles: list[WorkerHandle] = backend.launch(
            worker_cls,
            placements,
            group=self.name,
            args=self._args,
            kwargs=self._kwargs,
            timeout_s=self.start_timeout_s,
        )

    @property
    def world_size(self) -> int:
        """Number of workers."""
        return len(self.handles)

    def method(self, name: str) -> GroupMethod:
        """The group call for ``worker_cls.<name>``, with its registered dispatch mode."""
        fn = getattr(self.worker_cls, name, None)
        if fn is None or not callable(fn) or name.startswith("_"):
            raise AttributeError(f"{self.worker_cls.__name__} has no public method {name!r}")
        dispatch, collect = method_dispatch(fn)
        return GroupMethod(self, name, dispatch, collect)

    def __getattr__(self, name: str) -> GroupMethod:
        if name.startswith("_") or name in (
            "worker_cls", "handles", "placements", "backend", "name", "max_restarts", "on_restart", "restarts",
            "timeout_s", "start_timeout_s", "hung",
        ):  # fmt: skip
            raise AttributeError(name)
        return self.method(name)

    def execute_rank(self, rank: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``method`` on one rank only and return its output."""
        return self._call(rank, method, args, kwargs)

    @property
    def num_restarts(self) -> int:
        """Worker restarts so far, over every rank."""
        return sum(self.restarts)

    # ------------------------------------------------------------------ failures and restarts
    def _call(self, rank: int, method: str, args: tuple, kwargs: dict) -> Any:
        """Run one call on one rank and wait (inline on an idle local worker without a timeout)."""
        self._check_answering(rank, method)
        generation = self._generation[rank]
        try:
            out = self.handles[rank].call(method, args, kwargs, self.timeout_s)
        except Exception as exc:
            return self._after_failure(rank, generation, method, args, kwargs, exc, self.timeout_s)
        self._record(rank, method, args, kwargs)
        return out

    def unresponsive(self, timeout_s: float = 5.0) -> list[int] | None:
        """The ranks whose process does not answer a probe within ``timeout_s`` (stopped, frozen or dead, not merely
        busy); they count as hung from then on. None when the backend cannot tell (the local backend)."""
        silent = self.backend.unresponsive(self.handles, timeout_s)
        if silent is None:
            return None
        ranks = [r for r, quiet in enumerate(silent) if quiet]
        self.hung.update(ranks)
        return ranks

    def _check_answering(self, rank: int, method: str) -> None:
        """A rank whose earlier call timed out is still busy with it: a new call would only wait again."""
        if rank in self.hung:
            raise WorkerTimeout(
                self.name, [rank], method, float(self.timeout_s or 0.0), where=[self.handles[rank].where]
            )

    def _timed_out(
        self, ranks: Sequence[int], method: str, timeout: float | None
    ) -> WorkerTimeout | NodeLost:
        """The failure of a call on ``ranks`` that did not finish within ``timeout``: a lost node if the backend
        lost one (its workers cannot answer), else a timeout; the ranks count as hung."""
        lost = self._node_lost(ranks, method)
        if lost is not None:
            return lost
        self.hung.update(ranks)
        where = [self.handles[r].where for r in ranks]
        return WorkerTimeout(self.name, ranks, method, float(timeout or 0.0), where=where)

    def _node_lost(self, ranks: Sequence[int], method: str | None) -> NodeLost | None:
        lost = self.backend.lost_node()
        if lost is None:
            return None
        node_rank, node_id, address = lost
        on_node = [r for r in ranks if self.placements[r].node_rank == node_rank]
        named = on_node or list(ranks)
        return NodeLost(
            self.name,
            named,
            method,
            node_rank=node_rank,
            node_id=node_id,
            node_address=address,
            on_node=bool(on_node),
            where=[self.handles[r].where for r in named],
        )

    def _flags(self, method: str) -> tuple[bool, bool]:
        fn = getattr(self.worker_cls, method, None)
        return method_restart(fn) if fn is not None else (False, True)

    def _record(self, rank: int, method: str, args: tuple, kwargs: dict) -> None:
        """Remember a successful call of a replayed method (only when the group may restart workers)."""
        if self.max_restarts == 0 or not self._flags(method)[0]:
            return
        calls = self._replay[rank]
        calls.pop(method, None)  # the last call of each method, in the order of those last calls
        calls[method] = (args, kwargs)

    def _after_failure(
        self,
        rank: int,
        generation: int,
        method: str,
        args: tuple,
        kwargs: dict,
        exc: Exception,
        timeout: float | None,
    ) -> Any:
        """A call of ``method`` on the ``generation``-th worker of ``rank`` raised ``exc``: past its timeout, a
        :class:`WorkerTimeout`; after a node left the cluster, a :class:`NodeLost`; if that worker died, replace it
        (unless a call that failed before already did) and run the call again on the new one."""
        if isinstance(exc, WorkerFailure):
            raise exc
        if self.backend.timed_out(exc):
            raise self._timed_out([rank], method, self.timeout_s if self.timeout_s is not None else timeout)
        lost = self._node_lost([rank], method)
        if lost is not None:
            raise lost from exc
        if not self.backend.worker_died(exc) or not self._flags(method)[1]:
            raise exc
        with self._restart_lock:
            if self._generation[rank] == generation:
                self._restart(rank, exc)
            retry = _RankCall(self, rank, method, args, kwargs)
        return retry.result(timeout)

    def _restart(self, rank: int, exc: BaseException) -> None:
        """Replace rank ``rank``'s dead worker, replay its state, run ``on_restart`` and ``recover``.

        Raises:
            WorkerLost: the rank has used up its ``max_restarts``.
        """
        while True:
            if self.restarts[rank] >= self.max_restarts:
                raise WorkerLost(self.name, rank, self.restarts[rank], exc) from exc
            self.restarts[rank] += 1
            self._generation[rank] += 1
            logger.warning(
                "worker group %r rank %d died (%s: %s); restart %d of %d",
                self.name, rank, type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc).strip() else "",
                self.restarts[rank], self.max_restarts,
            )  # fmt: skip
            try:
                self.handles[rank] = self.backend.relaunch(
                    self.handles[rank],
                    self.worker_cls,
                    self.placements[rank],
                    args=self._args,
                    kwargs=self._kwargs,
                    timeout_s=self.start_timeout_s,
                )
                for method, (args, kwargs) in list(self._replay[rank].items()):
                    self.handles[rank].call(method, args, kwargs, self.start_timeout_s)
                if self.on_restart is not None:
                    self.on_restart(rank)
                self.handles[rank].call("recover", (), {}, self.start_timeout_s)
                return
            except Exception as again:
                if isinstance(again, WorkerFailure):
                    raise
                if self.backend.timed_out(again):
                    raise self._timed_out([rank], "recover", self.start_timeout_s) from None
                lost = self._node_lost([rank], None)
                if lost is not None:
                    raise lost from again
                if not self.backend.worker_died(again):
                    raise
                exc = again  # the replacement died too: replace it again while restarts are left

    def shutdown(self) -> None:
        """Stop every worker of the group (a hung rank without waiting for it)."""
        for rank, handle in enumerate(self.handles):
            handle.shutdown(force=rank in self.hung)
        self.handles = []
