"""Base class for env, rollout and actor workers; the same class runs on every backend."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from vla_infra.placement import ProcessPlacement

if TYPE_CHECKING:  # torch is imported where it is used: worker processes start faster without it
    import torch


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker knows about itself, set by the backend before ``__init__`` runs.

    Attributes:
        group: Name of the worker group (usually the component name).
        rank: Rank within the group.
        world_size: Size of the group.
        node_rank: Node index from the placement.
        local_rank: Rank among the group's processes on the same node.
        local_world_size: Number of the group's processes on the same node.
        local_gpu: GPU index on the node from the placement, or None on the CPU.
        device: The torch device string the worker should use (``"cpu"``, ``"cuda:0"``...). On Ray each
            worker sees only its own GPU (``CUDA_VISIBLE_DEVICES``), so it is ``cuda:0`` there.
        master_addr: Address of rank 0's node, for ``torch.distributed`` rendezvous.
        master_port: A free port on rank 0's node.
        backend: ``"local"`` or ``"ray"``.
    """

    group: str = "worker"
    rank: int = 0
    world_size: int = 1
    node_rank: int = 0
    local_rank: int = 0
    local_world_size: int = 1
    local_gpu: int | None = None
    device: str = "cpu"
    master_addr: str = "127.0.0.1"
    master_port: int = 0
    backend: str = "local"

    @classmethod
    def from_placement(
        cls,
        placement: ProcessPlacement,
        *,
        group: str,
        device: str,
        master_addr: str,
        master_port: int,
        backend: str,
    ) -> WorkerInfo:
        """Build the info of one process from its placement and the group's rendezvous address."""
        return cls(
            group=group,
            rank=placement.rank,
            world_size=placement.world_size,
            node_rank=placement.node_rank,
            local_rank=placement.local_rank,
            local_world_size=placement.local_world_size,
            local_gpu=placement.local_gpu,
            device=device,
            master_addr=master_addr,
            master_port=master_port,
            backend=backend,
        )

    def dist_env(self) -> dict[str, str]:
        """The ``torch.distributed`` environment variables of this worker."""
        return {
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
        }


class Worker:
    """Base class of all workers.

    Subclass it, write an ordinary ``__init__`` and methods, and tag methods with
    :func:`~vla_infra.workers.register` to say how a :class:`~vla_infra.workers.WorkerGroup` splits
    their inputs. The backend sets :attr:`info` before ``__init__`` runs, so ``__init__`` can already use
    ``self.rank``, ``self.world_size`` and ``self.device``. A worker built directly (``MyWorker()``) is
    rank 0 of 1 on the CPU, which is how a bare single-process loop uses the same class.
    """

    _worker_info: WorkerInfo

    @property
    def info(self) -> WorkerInfo:
        """Rank, world size, node, device and rendezvous address of this worker."""
        return getattr(self, "_worker_info", None) or WorkerInfo()

    @property
    def rank(self) -> int:
        """Rank within the group."""
        return self.info.rank

    @property
    def world_size(self) -> int:
        """Number of workers in the group."""
        return self.info.world_size

    @property
    def device(self) -> torch.device:
        """The torch device assigned to this worker."""
        import torch

        return torch.device(self.info.device)

    def init_process_group(self, backend: str | None = None) -> None:
        """Join the group's ``torch.distributed`` default process group (one worker per OS process).

        Args:
            backend: ``"nccl"``/``"gloo"``; defaults to nccl on a GPU and gloo on the CPU.

        Raises:
            RuntimeError: on the local backend with world_size > 1, where all ranks share one process.
        """
        import torch

        info = self.info
        if info.backend == "local" and info.world_size > 1:
            raise RuntimeError(
                "init_process_group needs one OS process per rank; the local backend runs all ranks "
                "in one process: use the Ray backend"
            )
        from vla_infra.rendezvous import tcp_store

        backend = backend or ("nccl" if info.local_gpu is not None and torch.cuda.is_available() else "gloo")
        if backend == "gloo" and str(info.master_addr).startswith("127."):
            os.environ.setdefault(
                "GLOO_SOCKET_IFNAME", "lo"
            )  # one machine: gloo's connections on loopback too
        # the store listens on MASTER_ADDR's interface only (loopback on one machine), not on every interface
        store = tcp_store(info.master_addr, int(info.master_port), info.world_size, is_master=info.rank == 0)
        torch.distributed.init_process_group(
            backend=backend, store=store, rank=info.rank, world_size=info.world_size
        )

    def recover(self) -> None:
        """Called on a worker that replaces a dead one, after its group replayed the calls marked
        ``@register(..., replay=True)`` and ran its ``on_restart`` callback, before the failed call is retried.

        The default does nothing; a worker whose callers hold state the dead process lost (an env's episodes in
        flight) says so here.
        """

    def abort(self) -> None:
        """Stop at once whatever this worker runs outside its own process (simulators), called from another thread
        while one of its calls does not return (a timeout on a backend that shares the driver's process). The stuck
        call may then fail; it must not start anything new. The default does nothing."""

    def ping(self) -> dict[str, Any]:
        """Where this worker runs: pid, info and the GPU environment (for checks and debugging)."""
        gpu_ids: list[Any] = []
        node_id = None
        if self.info.backend == "ray":
            import ray

            gpu_ids = [int(i) for i in ray.get_gpu_ids()]
            node_id = ray.get_runtime_context().get_node_id()
        return {
            "pid": os.getpid(),
            "info": self.info,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "gpu_ids": gpu_ids,
            "node_id": node_id,
            "env": {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")},
        }


W = TypeVar("W", bound=Worker)


def construct_worker(worker_cls: type[W], info: WorkerInfo, args: tuple, kwargs: dict) -> W:
    """Create a worker with ``info`` set before its ``__init__`` runs."""
    if not (isinstance(worker_cls, type) and issubclass(worker_cls, Worker)):
        raise TypeError(f"worker_cls must be a subclass of vla_infra.Worker, got {worker_cls!r}")
    worker = worker_cls.__new__(worker_cls)
    worker._worker_info = info
    worker.__init__(*args, **kwargs)  # type: ignore[misc]
    return worker


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
