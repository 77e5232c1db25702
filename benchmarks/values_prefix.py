"""``policy.values(obs)`` (the prefix forward) against ``predict(obs, mode="greedy").values`` (a full greedy decode),
tiny models on the CPU, B=16: prints each median time and the speed-up; the bound is a speed-up >= 0.9 (exits 1
with ``--strict`` when one fails): OpenVLA-OFT's "official" layout lets the critic position see the action slots,
so its values need the very forward predict runs (no gain, only the action head skipped); every other layout
runs the prefix alone.

    PYTHONPATH=packages/vla-models/src python benchmarks/values_prefix.py [--threads 1] [--repeats 7] [--strict]
"""

from __future__ import annotations

import argparse
import sys

import torch
from vla_models_tiny_cpu import _median, _obs  # the same observations and timing as the policy benchmark

from vla_models import OpenPiConfig, OpenVLAConfig, OpenVLAOFTConfig, build_policy


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--strict", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    families = {
        "openvla (C=2, 8 tokens)": OpenVLAConfig.tiny(action_dim=4, num_action_chunks=2, add_value_head=True),
        "openvla_oft causal_prefix": OpenVLAOFTConfig.tiny(
            action_dim=4, num_action_chunks=2, use_proprio=True, proprio_dim=4, add_value_head=True
        ),
        "openvla_oft official": OpenVLAOFTConfig.tiny(
            action_dim=4,
            num_action_chunks=2,
            use_proprio=True,
            proprio_dim=4,
            add_value_head=True,
            implement_version="official",
        ),
        "pi0 (K=4, expert critic)": OpenPiConfig.tiny(add_value_head=True),
        "pi0.5 (K=4, VLM critic)": OpenPiConfig.tiny(pi05=True, add_value_head=True),
    }
    obs = _obs(args.batch)
    failed = False
    print(f"B={args.batch}, threads={args.threads}, median of {args.repeats}")
    for name, cfg in families.items():
        policy = build_policy(cfg).eval()
        with torch.no_grad():
            t_predict = _median(lambda p=policy: p.predict(obs, mode="greedy").values, args.repeats)
            t_values = _median(lambda p=policy: p.values(obs), args.repeats)
        ratio = t_predict / t_values
        failed |= ratio < 0.9
        print(
            f"{name:28s} predict-greedy {t_predict * 1e3:7.1f} ms  values {t_values * 1e3:7.1f} ms  x{ratio:.2f}"
        )
    return 1 if (failed and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())
