"""Multi-node placement on a fake two-node x 8-GPU Ray cluster (ray.cluster_utils, 127.0.0.1 only): the
two-node layouts of the reference documents put each process on the right node and GPU."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep Ray on loopback (before importing ray)
ray = pytest.importorskip("ray")
cloudpickle = pytest.importorskip("ray.cloudpickle")
from ray.cluster_utils import Cluster  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "packages" / "vla-infra" / "tests"))
import probe_workers  # noqa: E402
from probe_workers import Probe  # noqa: E402

from vla_infra import RayBackend, WorkerGroup, resolve_placement  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

LAYOUTS = {
    "hybrid (000/001/003)": {"env": "0-7", "rollout": "8-15", "actor": "0-15"},
    "complete separation (000/001)": {"env": "0-3", "rollout": "4-7", "actor": "8-15"},
}


@pytest.fixture(scope="module")
def two_nodes():
    if ray.is_initialized():
        ray.shutdown()
    node_args = {"num_cpus": 1, "num_gpus": 8, "node_ip_address": "127.0.0.1"}
    cluster = Cluster(initialize_head=True, head_node_args={**node_args, "include_dashboard": False})
    try:
        cluster.add_node(**node_args)
        cluster.wait_for_nodes()
        ray.init(
            address=cluster.address,
            _node_ip_address="127.0.0.1",
            log_to_driver=False,
            configure_logging=False,
        )
        cloudpickle.register_pickle_by_value(probe_workers)
        backend = RayBackend(num_nodes=2, num_gpus_per_node=8)
        yield backend
        backend.shutdown()
        cloudpickle.unregister_pickle_by_value(probe_workers)
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_cluster_has_two_distinct_nodes(two_nodes):
    assert len(set(two_nodes.node_ids)) == 2
    assert sum(n["Resources"].get("GPU", 0) for n in ray.nodes() if n["Alive"]) == 16
    assert {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]} == {"127.0.0.1"}


@pytest.mark.parametrize("layout", list(LAYOUTS), ids=list(LAYOUTS))
def test_two_node_layout(two_nodes, layout):
    placement = resolve_placement(LAYOUTS[layout], num_nodes=2, num_gpus_per_node=8)
    groups = {name: WorkerGroup(Probe, procs, backend=two_nodes) for name, procs in placement.items()}
    try:
        for name, group in groups.items():
            seen_all = group.ping()
            for proc, seen in zip(placement[name], seen_all):
                assert seen["node_id"] == two_nodes.node_ids[proc.node_rank], (name, proc)
                assert seen["cuda_visible_devices"] == str(proc.local_gpu), (name, proc)
                assert seen["gpu_ids"] == [proc.local_gpu], (name, proc)
                assert seen["info"].node_rank == proc.node_rank
                assert seen["info"].local_rank == proc.local_rank
            # every rank of a group uses rank 0's node address for torch.distributed
            assert {s["env"]["MASTER_ADDR"] for s in seen_all} == {"127.0.0.1"}
            assert len({s["env"]["MASTER_PORT"] for s in seen_all}) == 1
        if "rollout" in placement and layout.startswith("hybrid"):
            # rollout 8-15 is the second node, env 0-7 the first
            env_nodes = {s["node_id"] for s in groups["env"].ping()}
            rollout_nodes = {s["node_id"] for s in groups["rollout"].ping()}
            assert env_nodes == {two_nodes.node_ids[0]} and rollout_nodes == {two_nodes.node_ids[1]}
    finally:
        for group in groups.values():
            group.shutdown()
