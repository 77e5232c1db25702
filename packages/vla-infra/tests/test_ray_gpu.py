"""On a real CUDA machine: a Ray worker placed on a GPU sees exactly that GPU as cuda:0 and can use it.
Skips without CUDA."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray")
cloudpickle = pytest.importorskip("ray.cloudpickle")

sys.path.insert(0, str(Path(__file__).parent))
import probe_workers  # noqa: E402

from vla_infra import RayBackend, Worker, WorkerGroup, resolve_placement  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.gpu]


class CudaProbe(Worker):
    def where(self) -> dict:
        x = torch.ones(4, device=self.device) * (self.rank + 1)
        return {
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "count": torch.cuda.device_count(),
            "device": str(x.device),
            "sum": float(x.sum().item()),
        }


@pytest.fixture(scope="module")
def gpu_backend():
    n = torch.cuda.device_count()
    ray.init(
        address="local",
        num_gpus=n,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
    )
    cloudpickle.register_pickle_by_value(probe_workers)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    backend = RayBackend(num_nodes=1, num_gpus_per_node=n)
    yield backend, n
    backend.shutdown()
    ray.shutdown()


def test_each_worker_sees_its_gpu(gpu_backend):
    backend, n = gpu_backend
    last = n - 1
    placement = resolve_placement(
        {"rollout": f"0-{last}", "env": f"0-{last}:0-{2 * n - 1}"}, num_nodes=1, num_gpus_per_node=n
    )
    for procs in placement.values():
        group = WorkerGroup(CudaProbe, procs, backend=backend)
        try:
            for proc, seen in zip(procs, group.where()):
                assert seen["visible"] == str(proc.local_gpu)
                assert seen["count"] == 1 and seen["device"] == "cuda:0"
                assert seen["sum"] == 4.0 * (proc.rank + 1)
        finally:
            group.shutdown()
