"""Offload round trip and weight-sync broadcast against their memory-copy / raw-broadcast peers.

Prints, for a model of ``--mb`` MiB of fp32 parameters (plus grads and AdamW state for offload):

- offload: ``offload_module + offload_optimizer + reload_*`` time over the time of cloning the same tensors
  twice (the copy each direction must do at least). Bound: ratio <= 3.
- weight sync: ``WeightSync.send`` / ``receive`` over their peer group (2 processes, gloo on 127.0.0.1) over one
  raw ``dist.broadcast`` of a flat buffer with the same bytes (the transport's floor). Bound: ratio <= 1.3.

Usage: ``python benchmarks/infra_offload_sync.py [--mb 64] [--repeats 5]`` (needs vla-infra importable).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from vla_infra.fsdp import spawn_local_group
from vla_infra.offload import offload_module, offload_optimizer, reload_module, reload_optimizer
from vla_infra.weight_sync import WeightSync
from vla_infra.workers.worker import find_free_port


def make_model(mb: int) -> nn.Module:
    width = 1024
    layers = max(1, mb * (1 << 20) // (4 * width * width))
    return nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)])


def bench_offload(mb: int, repeats: int) -> tuple[float, float]:
    model = make_model(mb)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 1024)).sum().backward()
    opt.step()
    tensors = [p.data for p in model.parameters()] + [p.grad for p in model.parameters()]
    tensors += [v for s in opt.state.values() for v in s.values() if v.dim() > 0]
    ours, peer = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        offload_module(model)
        offload_optimizer(opt)
        reload_module(model)
        reload_optimizer(opt)
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for t in tensors:
            t.clone().clone()
        peer.append(time.perf_counter() - t0)
    return statistics.median(ours), statistics.median(peer)


def sync_job(rank: int, world_size: int, mb: int, repeats: int, out: str) -> None:
    torch.manual_seed(rank)
    model = make_model(mb)
    box = [find_free_port() if rank == 0 else 0]
    dist.broadcast_object_list(box, src=0)
    sync = WeightSync.sender(model, rank=0) if rank == 0 else WeightSync.receiver(model, rank=0)
    sync.join("127.0.0.1", box[0], world_size=2)
    nbytes = sum(p.numel() * 4 for p in model.parameters())
    flat = torch.zeros(nbytes, dtype=torch.uint8)
    ours, peer = [], []
    for version in range(1, repeats + 1):
        dist.barrier()
        t0 = time.perf_counter()
        sync.send(version) if rank == 0 else sync.receive(version)
        dist.barrier()
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        dist.broadcast(flat, src=0)
        dist.barrier()
        peer.append(time.perf_counter() - t0)
    if rank == 0:
        Path(out).write_text(f"{statistics.median(ours)} {statistics.median(peer)} {nbytes}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    ours, peer = bench_offload(args.mb, args.repeats)
    ok_offload = ours / peer <= 3
    print(
        f"offload round trip: {ours * 1e3:.1f} ms, clone x2 peer: {peer * 1e3:.1f} ms, ratio {ours / peer:.2f} "
        f"(bound <= 3: {'PASS' if ok_offload else 'FAIL'})"
    )

    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "sync.txt")
        spawn_local_group(sync_job, world_size=2, args=(args.mb, args.repeats, out))
        s_ours, s_peer, nbytes = (float(x) for x in Path(out).read_text().split())
    ok_sync = s_ours / s_peer <= 1.3
    print(
        f"weight sync (gloo, 2 procs, {nbytes / 2**20:.0f} MiB): {s_ours * 1e3:.1f} ms "
        f"({nbytes / s_ours / 2**30:.2f} GiB/s), raw broadcast peer: {s_peer * 1e3:.1f} ms, "
        f"ratio {s_ours / s_peer:.2f} (bound <= 1.3: {'PASS' if ok_sync else 'FAIL'})"
    )
    return 0 if ok_offload and ok_sync else 1


if __name__ == "__main__":
    sys.exit(main())
