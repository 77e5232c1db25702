"""Tiny OpenVLA / OpenVLA-OFT / pi0 / pi0.5 on the CPU: predict latency and forward+backward time against the trainer's budget.

The CPU trainer (apps/train_embodied) needs ~50 policy decisions/s including a batched forward at B=8-16, so
the bound is: predict at B=8 <= 0.16 s (50 decisions/s) and evaluate forward+backward at B=8 <= 1 s.
Prints each time, the ratio to its bound (< 1 passes) and exits 1 with ``--strict`` when a bound fails.

    PYTHONPATH=packages/vla-models/src python benchmarks/vla_models_tiny_cpu.py [--threads 1] [--strict] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import torch

from vla_models import OpenPiConfig, OpenVLAConfig, OpenVLAOFTConfig, build_policy

BOUNDS = {"predict_b8": 0.16, "fwd_bwd_b8": 1.0}


def _obs(b: int) -> dict:
    rng = np.random.default_rng(0)
    return {
        "images": rng.integers(0, 256, (b, 64, 64, 3), dtype=np.uint8),
        "wrist_images": None,
        "states": rng.standard_normal((b, 4)).astype(np.float32),
        "task_descriptions": ["close the drawer", "press the button from the top"] * (b // 2),
    }


def _median(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--strict", action="store_true")
    ap.add_argument("--only", nargs="*", help="family rows to run (default: all), e.g. 'pi0 flow_sde'")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    failed = False
    families = {
        "openvla_oft": OpenVLAOFTConfig.tiny(
            action_dim=4, use_proprio=True, proprio_dim=4, add_value_head=True
        ),
        "openvla": OpenVLAConfig.tiny(action_dim=4, add_value_head=True),
        # flow policies: K=4 denoising steps, chunks of 4, 16 px patches (the quickstart's model/pi0_tiny.yaml)
        "pi0 flow_sde": OpenPiConfig.tiny(
            action_horizon=4, num_action_chunks=4, add_value_head=True, detach_critic_input=True
        ),
        "pi0 flow_sde train_expert_only": OpenPiConfig.tiny(
            action_horizon=4, num_action_chunks=4, add_value_head=True, train_expert_only=True
        ),
        "pi0 flow_noise joint": OpenPiConfig.tiny(
            action_horizon=4,
            num_action_chunks=4,
            add_value_head=True,
            noise_method="flow_noise",
            joint_logprob=True,
        ),
        "pi0.5 flow_sde": OpenPiConfig.tiny(
            action_horizon=4, num_action_chunks=4, add_value_head=True, pi05=True
        ),
    }
    only = set(args.only or families)
    for name, cfg in families.items():
        if name not in only:
            continue
        torch.manual_seed(0)
        policy = build_policy(cfg)
        n_params = sum(p.numel() for p in policy.parameters())
        opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-4)
        rows = {}
        for b in (8, 64):
            obs = _obs(b)
            rows[f"predict_b{b}"] = _median(lambda obs=obs, policy=policy: policy.predict(obs), args.repeats)
            fi = policy.predict(obs).forward_inputs

            def step(fi=fi, policy=policy, opt=opt) -> None:
                logp, ent, values = policy.evaluate(fi)
                loss = -logp.mean() - 0.01 * ent.mean() + values.pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()

            rows[f"fwd_bwd_b{b}"] = _median(step, args.repeats)
        print(f"{name}: {n_params / 1e6:.2f}M params, threads={args.threads}")
        for key, sec in rows.items():
            bound = BOUNDS.get(key)
            tail = f"  ratio to bound {sec / bound:.2f} (bound {bound} s)" if bound else ""
            print(f"  {key:12s} {sec * 1000:8.1f} ms{tail}")
            failed |= bool(bound and sec > bound)
        print(f"  decisions/s: B=8 {8 / rows['predict_b8']:.0f}, B=64 {64 / rows['predict_b64']:.0f}")
    return 1 if (failed and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())
