"""Worker-to-worker weight sync at real size: the trainer's path (``WeightSender`` -> ``TorchDistributedTransport``
over a ``PeerGroup`` -> in-place receive -> ``WeightReceiver``) between two processes, against one raw broadcast of
the same bytes over the same group. Prints the sync time, its GiB/s, the ratio (bound <= 1.3) and whether every
tensor arrived bit for bit (the receiver's per-tensor float64 sums equal the sender's).

    python benchmarks/weight_sync_scale.py                  # 2 GPUs: NCCL, 7e9 bf16 parameters (OpenVLA-7B)
    python benchmarks/weight_sync_scale.py --backend gloo --params 5e7 --dtype fp32   # the same code on the CPU

With ``--backend nccl`` and fewer than two CUDA GPUs it says so and exits 0 (nothing to measure). Exits 2 when a
tensor differs, 1 when the ratio is over the bound.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp
from torch import nn

from vla_infra.weight_sync import PeerGroup, TorchDistributedTransport, WeightReceiver, WeightSender
from vla_infra.workers.worker import find_free_port

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
WIDTH = 4096  # a Llama-2-7B projection is 4096 x 4096 (11008 for the MLP): 16.8M parameters per tensor here


def make_model(params: float, dtype: torch.dtype, device: torch.device, fill: bool) -> nn.Module:
    """Tensors of WIDTH x WIDTH (the last one shorter) adding up to `params` parameters: random on the sender,
    zeros on the receiver."""
    total, shapes = int(params), []
    while total > 0:
        rows = min(WIDTH, -(-total // WIDTH))
        shapes.append((rows, WIDTH))
        total -= rows * WIDTH
    gen = torch.Generator(device=device).manual_seed(0)
    model = nn.Module()
    model.layers = nn.ParameterList(
        [
            nn.Parameter(
                torch.randn(s, generator=gen, device=device, dtype=dtype)
                if fill
                else torch.zeros(s, device=device, dtype=dtype),
                requires_grad=False,
            )
            for s in shapes
        ]
    )
    return model


def sums(model: nn.Module) -> torch.Tensor:
    return torch.stack([p.detach().double().sum() for p in model.parameters()])


def job(rank: int, port: int, args: argparse.Namespace, out: str) -> None:
    device = torch.device(f"cuda:{rank}" if args.backend == "nccl" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    peers = PeerGroup("127.0.0.1", port, rank=rank, world_size=2, backend=args.backend)
    transport = TorchDistributedTransport(peers=peers, device=device)
    model = make_model(args.params, DTYPES[args.dtype], device, fill=rank == 0)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    sender = WeightSender(model) if rank == 0 else None
    receiver = WeightReceiver(model) if rank == 1 else None
    flat = torch.zeros(nbytes, dtype=torch.uint8, device=device)

    def sync(version: int) -> None:
        if sender is not None:
            update = sender.build_update(version=version)
            assert update is not None
            transport.send(update)
        else:
            assert receiver is not None
            update = transport.recv(model.state_dict(keep_vars=True), held_version=receiver.version)
            assert update is not None
            receiver.apply(update)

    def timed(fn) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        peers.broadcast(torch.zeros(1, device=device), 0)  # both start together
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    ours, raw = [], []
    for r in range(args.repeats + 1):  # the first of each is a warm-up (NCCL communicator, allocator)
        t_sync = timed(lambda r=r: sync(r + 1))
        t_raw = timed(lambda: peers.broadcast(flat, 0))
        if r > 0:
            ours.append(t_sync)
            raw.append(t_raw)
    mine = sums(model)
    theirs = mine.clone()
    peers.broadcast(theirs, 0)  # the sender's sums
    if rank == 1:
        Path(out).write_text(
            json.dumps(
                {
                    "sync_s": statistics.median(ours),
                    "raw_s": statistics.median(raw),
                    "bytes": nbytes,
                    "tensors": len(mine),
                    "bit_exact": bool(torch.equal(mine, theirs)),
                    "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
                }
            )
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    ap.add_argument("--params", type=float, default=7e9)
    ap.add_argument("--dtype", choices=tuple(DTYPES), default="bf16")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.backend == "nccl" and torch.cuda.device_count() < 2:
        print(
            f"weight_sync_scale: NCCL needs two CUDA GPUs, found {torch.cuda.device_count()}: nothing measured"
        )
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "result.json")
        mp.spawn(job, args=(find_free_port("127.0.0.1"), args, out), nprocs=2, join=True)
        res = json.loads(Path(out).read_text())
    ratio = res["sync_s"] / res["raw_s"]
    ok = ratio <= 1.3 and res["bit_exact"]
    print(
        f"weight sync ({args.backend}, {res['device']}, {args.params:.3g} {args.dtype} parameters, "
        f"{res['bytes'] / 2**30:.2f} GiB in {res['tensors']} tensors): {res['sync_s'] * 1e3:.1f} ms "
        f"({res['bytes'] / res['sync_s'] / 2**30:.2f} GiB/s), raw broadcast {res['raw_s'] * 1e3:.1f} ms, "
        f"ratio {ratio:.2f} (bound <= 1.3), bit-exact {res['bit_exact']}: {'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1 if res["bit_exact"] else 2


if __name__ == "__main__":
    sys.exit(main())
