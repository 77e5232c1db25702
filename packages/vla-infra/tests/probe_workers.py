"""A probe worker class shared by the placement, worker and channel tests on the local and Ray backends (a module of
its own, so that Ray actors can import it by name)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from vla_infra import Worker, register


class Probe(Worker):
    """Reports where it runs."""

    def __init__(self, tag: str = "") -> None:
        self.tag = tag
        self.pid = os.getpid()

    @register("split")
    def double(self, x: Any) -> Any:
        return x * 2

    def allreduce_rank(self) -> float:
        """Join torch.distributed over gloo and all-reduce the ranks (needs one process per rank)."""
        import torch
        import torch.distributed as dist

        self.init_process_group("gloo")
        t = torch.tensor([float(self.rank)])
        dist.all_reduce(t)
        dist.destroy_process_group()
        return float(t.item())

    def produce(self, channel: Any, n: int) -> int:
        for i in range(n):
            channel.put({"rank": self.rank, "i": i, "data": np.full(4, i)}, key=self.rank)
        return n

    def consume(self, channel: Any, key: Any, n: int) -> list[int]:
        return [int(channel.get(key=key, timeout=60)["i"]) for _ in range(n)]
