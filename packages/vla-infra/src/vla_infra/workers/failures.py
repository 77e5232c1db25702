"""Worker failures the driver cannot recover from in place: a call past its timeout, a lost node, a worker that
died once too often. Each names the worker group, its rank(s), the method that was running and, where known, the
worker's process and node, so that the run can end in one line that says which worker failed and where.

:func:`phase` names what the driver was doing (``generate_rollouts``, ``evaluation``...) on the failures raised
inside it; the innermost phase wins.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager


class WorkerFailure(RuntimeError):
    """A worker of a group failed in a way that ends the run (unless the run restarts from a checkpoint).

    Attributes:
        group: The worker group's name.
        ranks: The ranks that failed (a timeout may name several still-running ranks).
        method: The method that was running (``None``: not known).
        where: Per failed rank, where it ran (``"pid 123 on node 127.0.0.1"``), or empty when not known.
        phase: What the driver was doing, set by :func:`phase` (``None`` outside any phase).
        detail: The failure itself, on one line.
        unresponsive: Workers found not answering at all, ``(group, rank, where)``, set by whoever probed them
            after the failure (:meth:`WorkerGroup.unresponsive`): the cause when the failed call only waited for
            them.
    """

    def __init__(
        self,
        group: str,
        ranks: Sequence[int],
        method: str | None,
        detail: str,
        *,
        where: Sequence[str] = (),
    ) -> None:
        self.group, self.ranks, self.method = group, list(ranks), method
        self.where, self.detail = list(where), detail
        self.phase: str | None = None
        self.unresponsive: list[tuple[str, int, str]] = []
        super().__init__(self.describe())

    @property
    def worker(self) -> str:
        """``"rollout rank 0 (pid 123 on node 127.0.0.1)"``: the failed worker(s), for a one-line message."""
        ranks = ", ".join(str(r) for r in self.ranks)
        text = f"{self.group} rank{'s' if len(self.ranks) > 1 else ''} {ranks}"
        where = [w for w in self.where if w]
        return f"{text} ({'; '.join(where)})" if where else text

    def describe(self) -> str:
        """The failure on one line: worker, method, detail."""
        during = f" in {self.method}" if self.method else ""
        return f"worker {self.worker}{during}: {self.detail}"

    def __str__(self) -> str:  # the phase may be set after construction
        return self.describe() + (f" (phase {self.phase})" if self.phase else "")


class WorkerTimeout(WorkerFailure):
    """A call did not finish within the group's ``timeout_s`` (a hung process, a kernel that never returns). The
    ranks named are those still running when the time was up."""

    def __init__(
        self, group: str, ranks: Sequence[int], method: str, timeout_s: float, *, where: Sequence[str] = ()
    ) -> None:
        self.timeout_s = timeout_s
        super().__init__(group, ranks, method, f"no answer within {timeout_s:g} s", where=where)

    def describe(self) -> str:
        silent = [(g, r, w) for g, r, w in self.unresponsive if not (g == self.group and r in self.ranks)]
        own = [(g, r, w) for g, r, w in self.unresponsive if g == self.group and r in self.ranks]
        if silent:  # the call waited for a worker that stopped answering: that one is the cause
            names = "; ".join(f"{g} rank {r}" + (f" ({w})" if w else "") for g, r, w in silent)
            waited = f"worker {self.worker} waited for it in {self.method}"
            return f"worker {names} does not answer; {waited}: {self.detail}"
        if own and len(own) < len(self.ranks):  # of the ranks still running, these do not answer at all
            ranks = ", ".join(str(r) for _, r, _ in own)
            where = "; ".join(w for _, _, w in own if w)
            name = f"{self.group} rank{'s' if len(own) > 1 else ''} {ranks}" + (
                f" ({where})" if where else ""
            )
            return f"worker {name} in {self.method}: {self.detail}"
        return super().describe()


class NodeLost(WorkerFailure):
    """A node the workers run on left the cluster; its workers died with it and cannot be replaced in place.

    Attributes:
        node_rank: The node's rank in the placement.
        node_id: The cluster's id of the node.
        node_address: The node's address.
        on_node: The ranks named ran on that node (else they found it gone: a peer they waited for was there).
    """

    def __init__(
        self,
        group: str,
        ranks: Sequence[int],
        method: str | None,
        *,
        node_rank: int,
        node_id: str,
        node_address: str,
        on_node: bool = True,
        where: Sequence[str] = (),
    ) -> None:
        self.node_rank, self.node_id, self.node_address = node_rank, node_id, node_address
        self.on_node = on_node
        super().__init__(group, ranks, method, f"lost with {self.node}", where=where)

    @property
    def node(self) -> str:
        """``"node 1 (127.0.0.1, id 3f2a9c1e)"``."""
        return f"node {self.node_rank} ({self.node_address}, id {self.node_id[:8]})"

    def describe(self) -> str:
        during = f" in {self.method}" if self.method else ""
        if self.on_node:
            return f"{self.node} left the cluster; worker {self.worker} was on it{during}"
        return f"{self.node} left the cluster; worker {self.worker} found it gone{during}"


class WorkerLost(WorkerFailure):
    """A worker of a group died and may not be restarted again (its ``max_restarts`` are used up).

    Attributes:
        rank: The worker that was lost.
        restarts: How many times that rank was restarted before (its ``max_restarts``).
        last_error: The error of the call that found it dead.
    """

    def __init__(self, group: str, rank: int, restarts: int, last_error: BaseException) -> None:
        self.rank, self.restarts, self.last_error = rank, restarts, last_error
        last = [line.strip() for line in str(last_error).strip().splitlines() if line.strip()]
        super().__init__(
            group,
            [rank],
            None,
            f"its process died with {restarts} restart(s) done, max_restarts={restarts}; last error: "
            f"{type(last_error).__name__}: {last[0] if last else ''}",
        )

    def describe(self) -> str:
        return f"worker group {self.group!r} lost rank {self.rank}: {self.detail}"


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Name the phase on every :class:`WorkerFailure` raised inside (unless an inner phase named it already)."""
    try:
        yield
    except WorkerFailure as exc:
        if exc.phase is None:
            exc.phase = name
        raise
