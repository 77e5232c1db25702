"""pi0 and pi0.5 at their real size (PaliGemma 3B + 300M action expert, random weights, bf16) on one CUDA GPU.

Real sizes (SigLIP-So400m at 224 px, Gemma 2B, Gemma 300M expert), two cameras, the LIBERO presets
(``pi0_libero``: H = 50; ``pi05_libero``: H = 10, the state in the prompt), K = 10 denoising steps, ``flow_sde``,
a value head (on the expert for pi0, after the VLM for pi0.5). The in-code tokenizer stretched to the 257152-id
vocabulary stands in for PaliGemma's (prompt lengths therefore differ a little). Skips (exit 0) without CUDA;
``--tiny`` runs the same code path with the tiny configs (on the CPU when there is no GPU) as a smoke check.

Prints, each a median over ``--repeats`` runs (CUDA-synchronised wall time):
- ``predict`` (K expert passes over one cached prefix, then the exact recompute of the scored step) at each batch
  size: decisions/s, actions/s, and its ratio to one ``evaluate`` forward (peer measured in the same run; K expert
  passes cost more than the one ``evaluate`` makes, so the ratio is > 1);
- ``values``: time over ``predict``'s (a prefix forward, plus one expert pass for pi0's critic: < 1);
- the exactness check the trainer relies on: ``evaluate`` recomputes ``predict``'s log-probs and values (max
  absolute difference, must be 0);
- a PPO-style training step (evaluate + backward + AdamW) at B=8, full fine-tuning and ``train_expert_only``:
  time, ratio to the forward alone, and peak GPU memory.

    python benchmarks/openpi_gpu.py [--batch-sizes 8 32] [--repeats 5] [--tiny]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import torch


def _obs(b: int, size: int, state_dim: int) -> dict:
    rng = np.random.default_rng(0)
    return {
        "images": rng.integers(0, 256, (b, size, size, 3), dtype=np.uint8),
        "wrist_images": rng.integers(0, 256, (b, 1, size, size, 3), dtype=np.uint8),
        "states": rng.standard_normal((b, state_dim)).astype(np.float32),
        "task_descriptions": ["put both the alphabet soup and the tomato sauce in the basket"] * b,
    }


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn, repeats: int, dev: torch.device) -> float:
    fn()
    _sync(dev)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        _sync(dev)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _config(pi05: bool, tiny: bool, **fields):
    from vla_models import OpenPiConfig

    common = dict(
        config_name="pi05_libero" if pi05 else "pi0_libero",
        action_dim=7,
        add_value_head=True,
        noise_method="flow_sde",
        **fields,
    )
    if tiny:
        return OpenPiConfig.tiny(num_images_in_input=2, **common)
    return OpenPiConfig.pi0_base(tokenizer="tiny", precision="bf16", num_steps=10, **common)


def _build(cfg, dev: torch.device):
    from vla_models import build_policy

    torch.set_default_device(dev)
    try:
        return build_policy(cfg).to(dev)
    finally:
        torch.set_default_device("cpu")


def _peak_gib(dev: torch.device) -> str:
    if dev.type != "cuda":
        return "n/a (CPU)"
    return f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"


def _train_step(policy, fi, repeats: int, dev: torch.device, label: str) -> None:
    trainable = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-5)

    def step() -> None:
        logp, _, values = policy.evaluate(fi)
        loss = -logp.float().mean() + values.float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t_step = _timed(step, repeats, dev)
    with torch.no_grad():
        t_fwd = _timed(lambda: policy.evaluate(fi), repeats, dev)
    print(
        f"  train step B={fi['images'].shape[0]} ({label}, {sum(p.numel() for p in trainable) / 1e6:.0f}M "
        f"trainable): {t_step * 1e3:.1f} ms, ratio to forward {t_step / t_fwd:.2f}; peak memory {_peak_gib(dev)}"
    )


def bench(pi05: bool, args, dev: torch.device) -> int:
    name = "pi0.5" if pi05 else "pi0"
    cfg = _config(pi05, args.tiny)
    t0 = time.perf_counter()
    policy = _build(cfg, dev)
    print(
        f"{name} ({cfg.config_name}): {sum(p.numel() for p in policy.parameters()) / 1e9:.3f}B params, "
        f"H={cfg.action_horizon}, K={cfg.num_steps}, built in {time.perf_counter() - t0:.1f} s"
    )
    size, state_dim = cfg.sizes.image_size, 8
    status = 0
    with torch.no_grad():
        for b in args.batch_sizes:
            obs = _obs(b, size, state_dim)
            out = policy.predict(obs)
            fi = out.forward_inputs
            logp, _, values = policy.evaluate(fi)
            dlogp = (logp - out.logprobs).abs().max().item()
            dval = (values - out.values).abs().max().item()
            if dlogp != 0 or dval != 0:
                status = 1
            t_pred = _timed(lambda obs=obs: policy.predict(obs), args.repeats, dev)
            t_eval = _timed(lambda fi=fi: policy.evaluate(fi), args.repeats, dev)
            t_val = _timed(lambda obs=obs: policy.values(obs), args.repeats, dev)
            print(
                f"  predict B={b}: {t_pred * 1e3:.1f} ms, {b / t_pred:.1f} decisions/s, "
                f"{b * cfg.num_action_chunks / t_pred:.0f} env actions/s; ratio to one evaluate forward "
                f"{t_pred / t_eval:.2f}; values / predict {t_val / t_pred:.2f}; evaluate - predict max |diff| "
                f"log-prob {dlogp:.1e}, value {dval:.1e}"
            )
    fi = policy.predict(_obs(8, size, state_dim)).forward_inputs
    _train_step(policy, fi, args.repeats, dev, "full")
    policy = None  # free the full model before building the expert-only one
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    expert = _build(_config(pi05, args.tiny, train_expert_only=True), dev)
    fi = expert.predict(_obs(8, size, state_dim)).forward_inputs
    _train_step(expert, fi, args.repeats, dev, "train_expert_only")
    expert = None
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return status


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tiny", action="store_true", help="tiny configs (a smoke check; runs on the CPU too)")
    ap.add_argument("--only", choices=["pi0", "pi0.5"], default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available() and not args.tiny:
        print("SKIP: benchmarks/openpi_gpu.py needs a CUDA GPU (or --tiny)")
        return 0
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"device: {torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}")
    status = 0
    for pi05 in (False, True):
        if args.only in (None, "pi0.5" if pi05 else "pi0"):
            status |= bench(pi05, args, dev)
    if status:
        print("FAIL: evaluate did not recompute predict's log-probs / values exactly")
    return status


if __name__ == "__main__":
    sys.exit(main())
