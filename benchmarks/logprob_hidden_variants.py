"""Where the time of the hidden-state log-prob path goes on CUDA, at OpenVLA size (N=4096, H=4096, A=256, bf16).

    python benchmarks/logprob_hidden_variants.py [--peak-gbps 3350]

Compares, forward and forward+backward (median of triton.testing.do_bench):
- the fused Triton kernel with its autotuned config, and with a set of explicit tile configs;
- cuBLAS for the action GEMM with fp32 output (``torch.mm(..., out_dtype=torch.float32)``) followed by the
  fused logits kernel on the ``[N, A]`` result (4 MiB at this size);
- the bare GEMMs (bf16 and fp32 output), the floor of any variant.
Prints the bandwidth fraction (bytes that must move / time / peak) and TFLOP/s of each. Skips without CUDA.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "vla-models" / "src"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--num-actions", type=int, default=256)
    ap.add_argument("--peak-gbps", type=float, default=3350.0)
    ap.add_argument("--profile", action="store_true", help="print the CUDA kernels of the fused fwd+bwd")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: needs a CUDA GPU")
        return 0
    import triton
    from triton.testing import do_bench

    from vla_models.kernels import action_token_logprobs, action_token_logprobs_from_hidden
    from vla_models.kernels.triton_hidden import _hidden_fwd_kernel

    n, hs, a, vocab = args.n, args.hidden, args.num_actions, 32064
    start = 32000 - a
    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(n, hs, device="cuda", dtype=torch.bfloat16, generator=g)
    w = (torch.randn(vocab, hs, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02).contiguous()
    ids = torch.randint(start, start + a, (n,), device="cuda", generator=g)
    ids0 = ids - start
    wa = w[start : start + a]
    moved = (n * hs + a * hs) * 2 + n * 4 * 3  # hidden + action rows of W in, 3 fp32 per row out
    flops = 2 * n * hs * a
    print(f"device: {torch.cuda.get_device_name()}, N={n} H={hs} A={a} bf16, peak {args.peak_gbps:.0f} GB/s")

    def report(name: str, ms: float) -> None:
        gbps = moved / (ms * 1e-3) / 1e9
        print(
            f"  {name:52s} {ms * 1e3:8.1f} us  {gbps:6.0f} GB/s = {gbps / args.peak_gbps:.3f} of peak  "
            f"{flops / (ms * 1e-3) / 1e12:5.0f} TFLOP/s"
        )

    fused = lambda: action_token_logprobs_from_hidden(  # noqa: E731
        h, w, ids, action_start=start, num_actions=a, backend="triton", check_ids=False
    )
    report("fused kernel, autotuned (fwd)", do_bench(fused))
    print(f"    autotune picked: {_hidden_fwd_kernel.best_config}")
    lp, ent, lse = (torch.empty(n, device="cuda") for _ in range(3))
    for bn, bk, warps, stages in [
        (16, 128, 4, 3), (32, 64, 4, 3), (32, 128, 8, 3), (64, 64, 4, 3), (64, 64, 8, 4),
        (64, 128, 8, 2), (128, 64, 8, 3), (128, 32, 8, 4),
    ]:  # fmt: skip
        grid = (triton.cdiv(n, bn),)

        def run(bn=bn, bk=bk, warps=warps, stages=stages, grid=grid) -> None:
            _hidden_fwd_kernel.fn[grid](
                h, w, ids, lp, ent, lse, n, hs, h.stride(0), h.stride(1), w.stride(0), w.stride(1), start, a,
                1.0, BLOCK_N=bn, BLOCK_A=256, BLOCK_K=bk, INPUT_PRECISION="tf32", UPCAST_DOT=False,
                num_warps=warps, num_stages=stages,
            )  # fmt: skip

        try:
            report(f"fused kernel BLOCK_N={bn} BLOCK_K={bk} warps={warps} stages={stages}", do_bench(run))
        except Exception as exc:  # a config that does not fit is reported and skipped
            print(f"  BLOCK_N={bn} BLOCK_K={bk} warps={warps} stages={stages}: {type(exc).__name__}")

    def mm_then_logits(hh: torch.Tensor = h):
        z = torch.mm(hh, wa.t(), out_dtype=torch.float32)
        return action_token_logprobs(
            z, ids0, action_start=0, num_actions=a, backend="triton", check_ids=False
        )

    try:
        ref = fused()
        got = mm_then_logits()
        err = max((ref[0] - got[0]).abs().max().item(), (ref[1] - got[1]).abs().max().item())
        report(
            f"cuBLAS mm (fp32 out) + logits kernel (fwd; max diff to fused {err:.1e})",
            do_bench(mm_then_logits),
        )
        report("  cuBLAS mm fp32 out alone", do_bench(lambda: torch.mm(h, wa.t(), out_dtype=torch.float32)))
    except Exception as exc:
        print(f"  cuBLAS mm with out_dtype: {type(exc).__name__}: {exc}")
    report("  cuBLAS mm bf16 out alone", do_bench(lambda: h @ wa.t()))

    hr = h.clone().requires_grad_(True)

    def fused_fb() -> None:
        lp_, ent_ = action_token_logprobs_from_hidden(
            hr, w, ids, action_start=start, num_actions=a, backend="triton", check_ids=False
        )
        (lp_.sum() + 0.01 * ent_.sum()).backward()

    report("fused kernel fwd+bwd (frozen head)", do_bench(fused_fb, grad_to_none=[hr]))
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                fused_fb()
                hr.grad = None
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15, max_name_column_width=60))

    def mm_fb() -> None:
        lp_, ent_ = mm_then_logits(hr)
        (lp_.sum() + 0.01 * ent_.sum()).backward()

    try:
        report("cuBLAS mm + logits kernel fwd+bwd (frozen head)", do_bench(mm_fb, grad_to_none=[hr]))
    except Exception as exc:
        print(f"  cuBLAS mm fwd+bwd: {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
