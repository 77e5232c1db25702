"""Peak resident memory of a save and a reload, in a fresh process (run by test_memory_peaks.py).

``MALLOC_MMAP_THRESHOLD_=131072 python memory_child.py FAMILY FOLDER`` builds the model, saves it to FOLDER,
frees it and loads it back, and prints one JSON line: the weights' bytes and how far the process's resident
memory rose above its level before each operation (``/proc/self/clear_refs`` resets the high-water mark
``VmHWM``, so only the operation's peak counts; the fixed mmap threshold makes every tensor its own mapping,
returned to the system when freed, so the resident memory is what is alive). The model is mid-sized (~170-230 MB of bf16
weights, LoRA on every decoder projection), large enough that a second copy of the weights stands far above the
allocator's noise.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import re
import sys
import tempfile
from pathlib import Path


def _status(field: str) -> int:
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+) kB", text).group(1)) * 1024


def reset_peak() -> int:
    """Reset the high-water mark to the current resident memory; returns that."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status("VmRSS")


def peak() -> int:
    return _status("VmHWM")


def config(family: str, *, tiny: bool = False):
    from vla_models import OpenPiConfig, OpenVLAConfig
    from vla_models.prismatic.configuration_prismatic import PrismaticConfig

    common = dict(precision="bf16", is_lora=True, lora_rank=8)
    if family == "openvla":
        backbone = PrismaticConfig.tiny() if tiny else PrismaticConfig.tiny(hidden_size=1024, num_layers=8)
        return OpenVLAConfig.tiny(backbone=backbone, **common)
    if family == "pi0":
        cfg = OpenPiConfig.tiny(train_expert_only=False, **common)
        if tiny:
            return cfg
        sizes = dataclasses.replace(
            cfg.sizes,
            width=1024,
            depth=6,
            mlp=4096,
            num_heads=8,
            head_dim=128,
            expert_width=512,
            expert_mlp=2048,
        )
        return cfg.replace(sizes=sizes)
    raise ValueError(family)


def weight_bytes(policy) -> int:
    return sum(t.numel() * t.element_size() for t in policy.state_dict().values())


def main() -> None:
    import torch

    torch.manual_seed(0)
    family, folder = sys.argv[1:3]
    from vla_models import build_policy, load_policy

    with tempfile.TemporaryDirectory() as warm:  # imports and first-call costs, on a tiny model
        build_policy(config(family, tiny=True)).save_pretrained(warm)
        load_policy(warm)
    policy = build_policy(config(family))
    out = {"weights": weight_bytes(policy)}
    gc.collect()
    base = reset_peak()
    policy.save_pretrained(folder)
    out["save_rise"] = peak() - base
    del policy
    gc.collect()
    base = reset_peak()
    policy = load_policy(folder)
    out["reload_rise"] = peak() - base
    out["reloaded_weights"] = weight_bytes(policy)
    out["meta"] = [n for n, p in policy.named_parameters() if p.is_meta]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
