"""A process group of its own between the actor's sending rank and the rollout ranks."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from vla_infra.rendezvous import tcp_store


class PeerGroup:
    """A process group of its own between separate processes: the actor's sending rank and the rollout ranks.

    Rank 0 hosts a TCP store at ``host:port``; every member constructs the group at the same time (the call
    blocks until all ``world_size`` members joined). It does not touch ``torch.distributed``'s default group.

    Args:
        host, port: Rank 0's address (reachable by every member) and a free port there.
        rank, world_size: This member's rank and the number of members.
        backend: ``"gloo"`` (CPU tensors) or ``"nccl"`` (CUDA tensors).
        bind_host: Interface gloo binds on this member (default: ``host`` when it is a loopback address, so a
            single-machine group never listens beyond 127.0.0.1; else the machine's default interface).
        timeout_s: How long a collective or the rendezvous waits for the other members.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        rank: int,
        world_size: int,
        backend: str = "gloo",
        bind_host: str | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"backend={backend!r} is not supported; allowed: 'gloo', 'nccl'")
        timeout = timedelta(seconds=timeout_s)
        self.rank, self.world_size, self.backend = rank, world_size, backend
        # listens on `host`'s interface only (loopback on one machine)
        self.store = tcp_store(host, port, world_size, is_master=rank == 0, timeout=timeout)
        if backend == "gloo":
            opts = dist.ProcessGroupGloo._Options()
            if bind_host is None and host.startswith("127."):
                bind_host = host
            opts._devices = [
                dist.ProcessGroupGloo.create_device(hostname=bind_host)
                if bind_host
                else dist.ProcessGroupGloo.create_default_device()
            ]
            opts._timeout = timeout
            self.pg: dist.ProcessGroup = dist.ProcessGroupGloo(self.store, rank, world_size, opts)
        else:
            nccl_opts = dist.ProcessGroupNCCL.Options()
            nccl_opts._timeout = timeout
            self.pg = dist.ProcessGroupNCCL(self.store, rank, world_size, nccl_opts)

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        """In place: every member ends with ``src``'s ``tensor``."""
        opts = dist.BroadcastOptions()
        opts.rootRank = src
        opts.rootTensor = 0
        self.pg.broadcast([tensor], opts).wait()
