"""What a backend provides: start one worker per placement, call its methods, make channels."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, Protocol

from vla_infra.placement import ProcessPlacement
from vla_infra.workers.worker import Worker

if TYPE_CHECKING:
    from vla_infra.channel import Channel


class ResultFuture(Protocol):
    """A pending result of one call on one worker."""

    def result(self, timeout: float | None = None) -> Any:
        """Block until the call finished (at most ``timeout`` seconds); return its value or raise its exception."""
        ...

    def done(self) -> bool:
        """True once the call finished (with a value or an exception)."""
        ...


class WorkerHandle(ABC):
    """One running worker, seen from the driver."""

    #: Where the worker runs, for messages (``"pid 123 on node 127.0.0.1"``; empty when not known).
    where: str = ""

    @abstractmethod
    def submit(self, method: str, args: tuple, kwargs: dict) -> ResultFuture:
        """Queue ``worker.method(*args, **kwargs)``; calls on one worker run one at a time, in order."""

    def call(self, method: str, args: tuple, kwargs: dict, timeout: float | None = None) -> Any:
        """Run ``worker.method(*args, **kwargs)`` and wait for it (at most ``timeout`` seconds)."""
        return self.submit(method, args, kwargs).result(timeout)

    @abstractmethod
    def shutdown(self, *, force: bool = False) -> None:
        """Stop the worker and free what it holds. ``force``: the worker does not answer (a call on it timed out):
        stop it without waiting for it."""


class Backend(ABC):
    """Starts workers where their placements say and makes channels between them."""

    name: str

    @abstractmethod
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
        """Start one worker per placement (in rank order) and return their handles.

        Raises:
            WorkerTimeout: a worker's ``__init__`` did not finish within ``timeout_s`` (every worker started is
                stopped again, as on any other error).
        """

    @abstractmethod
    def create_channel(self, *, maxsize: int = 0, name: str | None = None) -> Channel:
        """A :class:`~vla_infra.channel.Channel` that every worker of this backend can use."""

    def worker_died(self, exc: BaseException) -> bool:
        """True if ``exc``, raised by a call, means the worker's process is gone (not an error of the call)."""
        return False

    def timed_out(self, exc: BaseException) -> bool:
        """True if ``exc``, raised by waiting for a call, means its timeout passed (the call may still run)."""
        return isinstance(exc, (TimeoutError, FutureTimeout))  # distinct classes before Python 3.11

    def unresponsive(self, handles: Sequence[WorkerHandle], timeout_s: float) -> list[bool] | None:
        """For each handle, whether its process does not answer within ``timeout_s`` even though a call may still run
        there (a stopped or frozen process, not a busy one); None when the backend cannot tell (workers that share
        the driver's process)."""
        return None

    def lost_node(self) -> tuple[int, str, str] | None:
        """``(node rank, node id, address)`` of a node this backend placed workers on that has left the cluster,
        or None (a backend on one machine never loses a node)."""
        return None

    def relaunch(
        self,
        handle: WorkerHandle,
        worker_cls: type[Worker],
        placement: ProcessPlacement,
        *,
        args: tuple,
        kwargs: dict,
        timeout_s: float | None = None,
    ) -> WorkerHandle:
        """Start a replacement of the dead worker ``handle`` on the same placement, with the same rank, rendezvous
        address and constructor arguments, and return its handle.

        Raises:
            NotImplementedError: the backend cannot lose a worker on its own (all workers in this process).
        """
        raise NotImplementedError(f"backend {self.name!r} does not restart workers")

    def shutdown(self) -> None:  # noqa: B027 - optional hook
        """Release backend-wide resources (Ray placement groups, ...)."""
