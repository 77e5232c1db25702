"""A group of workers of one class, one per placed process, called like a single object."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from vla_infra.placement import ProcessPlacement
from vla_infra.workers.backend import Backend, ResultFuture, WorkerHandle
from vla_infra.workers.dispatch import collect_outputs, dispatch_args, method_dispatch
from vla_infra.workers.worker import Worker


class GroupFuture:
    """The pending, gathered result of one call on a worker group."""

    def __init__(self, futures: list[ResultFuture], collect: str | Callable[[list[Any]], Any]) -> None:
        self._futures = futures
        self._collect = collect

    def result(self, timeout: float | None = None) -> Any:
        """Wait for every rank and return the gathered output (raises the first rank's error)."""
        return collect_outputs(self._collect, [f.result(timeout) for f in self._futures])

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
        handles = self._group.handles
        calls = dispatch_args(self.dispatch, len(handles), args, kwargs)
        futures = [handles[rank].submit(self._method, a, kw) for rank, a, kw in calls]
        return GroupFuture(futures, self.collect)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the call on every rank and return the gathered output."""
        handles = self._group.handles
        calls = dispatch_args(self.dispatch, len(handles), args, kwargs)
        if len(calls) == 1:  # a single rank runs: no need to go through futures
            rank, a, kw = calls[0]
            return collect_outputs(self.collect, [handles[rank].call(self._method, a, kw)])
        futures = [handles[rank].submit(self._method, a, kw) for rank, a, kw in calls]
        return collect_outputs(self.collect, [f.result() for f in futures])


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
    ) -> None:
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
        self.handles: list[WorkerHandle] = backend.launch(
            worker_cls, placements, group=self.name, args=tuple(args), kwargs=dict(kwargs or {})
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
        if name.startswith("_") or name in ("worker_cls", "handles", "placements", "backend", "name"):
            raise AttributeError(name)
        return self.method(name)

    def execute_rank(self, rank: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``method`` on one rank only and return its output."""
        return self.handles[rank].call(method, args, kwargs)

    def shutdown(self) -> None:
        """Stop every worker of the group."""
        for handle in self.handles:
            handle.shutdown()
        self.handles = []


def wait_all(futures: Sequence[GroupFuture], timeout: float | None = None) -> list[Any]:
    """Wait for several group calls (e.g. env and rollout overlapping) and return their outputs."""
    return [f.result(timeout) for f in futures]
