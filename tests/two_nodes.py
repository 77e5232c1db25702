"""A fake two-node Ray cluster on this machine for the multi-node tests and benchmarks (`ray.cluster_utils`): node
rank 0 is the head, node rank 1 a second raylet; each has its own CPU resources and its `vla-infra/node-rank`
label, every address is 127.0.0.1. Runs join it with `cluster.ray_address=<address>`, as a real run joins a
cluster with `auto`.

No GPU here: the reference documents' two-node layouts are given on a CPU cluster, where the placement's resource
ids are nodes (`cluster.num_gpus_per_node=0`): "complete separation" (env 0-3 and rollout 4-7 on node 0, actor 8-15
on node 1) becomes `{env: 0, rollout: 0, actor: 1}`, the hybrid layout (env 0-7 on node 0, rollout 8-15 on node 1,
actor 0-15 on both) becomes `{env: 0, rollout: 1, actor: 0-1}`.
"""

from __future__ import annotations

import atexit
import os
import time
from collections import Counter
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep Ray on loopback (before importing ray)

NODE_RANK_LABEL = "vla-infra/node-rank"
SEPARATION = "cluster.component_placement={env: 0, rollout: 0, actor: 1}"
HYBRID = "cluster.component_placement={env: 0, rollout: 1, actor: 0-1}"


def node_args(rank: int, num_cpus: int) -> dict[str, Any]:
    return {"num_cpus": num_cpus, "node_ip_address": "127.0.0.1", "labels": {NODE_RANK_LABEL: str(rank)}}


class TwoNodes:
    """The cluster: `address` to join, `remove_worker_node()` to lose node 1 (`Cluster.remove_node`, as when a
    machine goes away), `add_worker_node()` to bring a replacement with the same label."""

    def __init__(self, num_cpus: int = 2) -> None:
        from ray.cluster_utils import Cluster

        self.num_cpus = num_cpus
        head = {**node_args(0, num_cpus), "include_dashboard": False}
        # shutdown_at_exit=False: a node added from another thread (a replacement, while a run waits in the main
        # thread) would install a SIGTERM handler, which only the main thread may; `shutdown` is registered instead
        self.cluster = Cluster(initialize_head=True, head_node_args=head, shutdown_at_exit=False)
        atexit.register(self.shutdown)
        self.worker: Any = None
        try:
            self.add_worker_node()
        except BaseException:
            self.shutdown()
            raise

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def overrides(self, placement: str) -> list[str]:
        """The run's `cluster.*` overrides: Ray, two CPU nodes, this cluster, `placement`."""
        return [
            "cluster.backend=ray",
            "cluster.num_nodes=2",
            "cluster.num_gpus_per_node=0",
            f"cluster.ray_address={self.address}",
            placement,
        ]

    def add_worker_node(self) -> None:
        self.worker = self.cluster.add_node(**node_args(1, self.num_cpus))
        self.cluster.wait_for_nodes()

    def remove_worker_node(self) -> float:
        """Remove node 1; returns the time it was removed (`time.monotonic()`)."""
        node, self.worker = self.worker, None
        self.cluster.remove_node(node)
        return time.monotonic()

    def ensure_worker_node(self) -> None:
        if self.worker is None:
            self.add_worker_node()

    def shutdown(self) -> None:
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            cluster.shutdown()


def node_ranks(node_ids: list[str]) -> list[int]:
    """The `vla-infra/node-rank` label of each Ray node id (from a connected driver)."""
    import ray

    labels = {n["NodeID"]: (n.get("Labels") or {}).get(NODE_RANK_LABEL) for n in ray.nodes()}
    return [int(labels[i]) for i in node_ids]


class DriverBytes:
    """Serialized bytes of every worker call's arguments and results passing through the driver, by method (what
    Ray pickles; the count of `benchmarks/driver_traffic.py`). `install(monkeypatch)` patches the Ray handles."""

    SYNC_METHODS = ("send_weights", "receive_weights", "join_weight_sync", "weight_sync_endpoint")

    def __init__(self) -> None:
        self.bytes: Counter[str] = Counter()

    def install(self, patch: Any) -> None:
        """`patch`: a pytest MonkeyPatch (undone after the test) or anything with its `setattr`."""
        import ray.cloudpickle as cloudpickle

        from vla_infra.workers import ray_backend

        meter = self
        submit, result = ray_backend.RayWorkerHandle.submit, ray_backend._RayFuture.result

        def counted_submit(handle: Any, method: str, args: tuple, kwargs: dict) -> Any:
            meter.bytes[method] += len(cloudpickle.dumps((args, kwargs)))
            future = submit(handle, method, args, kwargs)
            future.method = method
            return future

        def counted_result(future: Any, timeout: float | None = None) -> Any:
            out = result(future, timeout)
            meter.bytes[getattr(future, "method", "?")] += len(cloudpickle.dumps(out))
            return out

        patch.setattr(ray_backend.RayWorkerHandle, "submit", counted_submit)
        patch.setattr(ray_backend._RayFuture, "result", counted_result)

    @property
    def total(self) -> int:
        return sum(self.bytes.values())

    @property
    def sync(self) -> int:
        return sum(self.bytes[m] for m in self.SYNC_METHODS)
