"""What a backend provides: start one worker per placement, call its methods, make channels."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from vla_infra.placement import ProcessPlacement
from vla_infra.workers.worker import Worker

if TYPE_CHECKING:
    from vla_infra.channel import Channel


class ResultFuture(Protocol):
    """A pending result of one call on one worker."""

    def result(self, timeout: float | None = None) -> Any:
        """Block until the call finished; return its value or raise its exception."""
        ...


class WorkerHandle(ABC):
    """One running worker, seen from the driver."""

    @abstractmethod
    def submit(self, method: str, args: tuple, kwargs: dict) -> ResultFuture:
        """Queue ``worker.method(*args, **kwargs)``; calls on one worker run one at a time, in order."""

    def call(self, method: str, args: tuple, kwargs: dict) -> Any:
        """Run ``worker.method(*args, **kwargs)`` and wait for it."""
        return self.submit(method, args, kwargs).result()

    @abstractmethod
    def shutdown(self) -> None:
        """Stop the worker and free what it holds."""


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
    ) -> list[WorkerHandle]:
        """Start one worker per placement (in rank order) and return their handles."""

    @abstractmethod
    def create_channel(self, *, maxsize: int = 0, name: str | None = None) -> Channel:
        """A :class:`~vla_infra.channel.Channel` that every worker of this backend can use."""

    def worker_died(self, exc: BaseException) -> bool:
        """True if ``exc``, raised by a call, means the worker's process is gone (not an error of the call)."""
        return False

    def relaunch(
        self,
        handle: WorkerHandle,
        worker_cls: type[Worker],
        placement: ProcessPlacement,
        *,
        args: tuple,
        kwargs: dict,
    ) -> WorkerHandle:
        """Start a replacement of the dead worker ``handle`` on the same placement, with the same rank, rendezvous
        address and constructor arguments, and return its handle.

        Raises:
            NotImplementedError: the backend cannot lose a worker on its own (all workers in this process).
        """
        raise NotImplementedError(f"backend {self.name!r} does not restart workers")

    def shutdown(self) -> None:  # noqa: B027 - optional hook
        """Release backend-wide resources (Ray placement groups, ...)."""
