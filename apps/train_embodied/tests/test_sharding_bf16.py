"""bf16 mixed precision of a sharded actor keeps the sampling temperature exact.

FSDP2 casts the floating-point inputs of a module's forward to `param_dtype`; the rollout's `forward_inputs`
carry the temperature as an fp32 tensor, and bf16 turns 1.6 into 1.6015625, which would bias every recomputed
log-prob against the rollout's. `shard_policy` therefore leaves the root's inputs alone (the policy casts its own
float inputs). Two gloo ranks on the CPU, the real tiny OpenVLA-OFT.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# spawn_local_group pickles its function by name: run it from a script (importable as __main__ in the children)
SCRIPT = """
import sys

import numpy as np
import torch

from train_embodied.config.sections import FSDPSection, ModelSection
from train_embodied.policy_io import build_policy_for_run
from train_embodied.sharding import shard_policy
from vla_infra.fsdp import spawn_local_group

SECTION = ModelSection(image_size=32, extra={"patch_size": 16, "hidden_size": 64})


def inputs():
    torch.manual_seed(0)
    policy = build_policy_for_run(SECTION, None)
    rng = np.random.default_rng(0)
    obs = {
        "images": rng.integers(0, 255, size=(4, 32, 32, 3), dtype=np.uint8),
        "states": rng.normal(size=(4, 4)).astype(np.float32),
        "task_descriptions": ["close the drawer"] * 4,
    }
    with torch.no_grad():
        fi = policy.predict(obs, mode="sample", temperature=1.6).forward_inputs
    return policy, fi


def seen_temperature(policy, cast_root_inputs):
    # shard `policy` in bf16 and return the temperature that its `evaluate` body receives
    import dataclasses
    import types

    import train_embodied.sharding as sharding

    _, fi = inputs()
    seen = {}
    body = policy.evaluate

    def spy(self, forward_inputs, **kwargs):
        seen["t"] = forward_inputs["temperature"].detach().clone()
        return body(forward_inputs, **kwargs)

    policy.evaluate = types.MethodType(spy, policy)  # the method FSDP wraps (its casts happen before the body)
    original = sharding.fsdp_config_for
    if cast_root_inputs:  # FSDP's default: the old behaviour, to show that the test can tell
        sharding.fsdp_config_for = lambda *a: dataclasses.replace(original(*a), cast_root_inputs=True)
    section = FSDPSection(
        strategy="fsdp2",
        sharding_strategy="full_shard",
        mixed_precision={"param_dtype": "bf16", "reduce_dtype": "fp32"},
    )
    try:
        shard_policy(policy, section)
    finally:
        sharding.fsdp_config_for = original
    with torch.no_grad():
        logprobs, _, _ = policy.evaluate(fi, compute_values=False)
    assert torch.isfinite(logprobs).all()
    return seen["t"]


def sharded(rank, world_size, out):
    fixed = seen_temperature(inputs()[0], cast_root_inputs=False)
    cast = seen_temperature(inputs()[0], cast_root_inputs=True)
    if rank == 0:
        torch.save({"fixed": fixed, "cast": cast}, out)


if __name__ == "__main__":
    spawn_local_group(sharded, world_size=2, args=(sys.argv[1] + "/seen.pt",))
    print("ok")
"""


def test_bf16_sharded_evaluate_keeps_the_temperature(tmp_path: Path) -> None:
    import torch

    script = tmp_path / "bf16_temperature.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
    seen = torch.load(tmp_path / "seen.pt", weights_only=True)
    assert seen["fixed"].dtype == torch.float32
    assert torch.equal(seen["fixed"], torch.full((4,), 1.6))
    # with FSDP casting the root's inputs, the body would see a bf16 1.6015625: the test can tell
    assert seen["cast"].dtype == torch.bfloat16 and float(seen["cast"][0]) == 1.6015625
