"""``values(obs)``: the critic of ``predict(obs, mode="greedy")`` from the prefix forward alone, for every family."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vla_models import OpenPiConfig, OpenVLAConfig, OpenVLAOFTConfig, build_policy, stats_from_bounds

STATS = stats_from_bounds([-1.0] * 4, [1.0] * 4, key="mw")

PRISMATIC = {
    "openvla": lambda **kw: OpenVLAConfig.tiny(action_dim=4, num_action_chunks=2, norm_stats=STATS, **kw),
    "oft-causal_prefix": lambda **kw: OpenVLAOFTConfig.tiny(
        action_dim=4, num_action_chunks=2, use_proprio=True, proprio_dim=4, norm_stats=STATS, **kw
    ),
    "oft-official": lambda **kw: OpenVLAOFTConfig.tiny(
        action_dim=4,
        num_action_chunks=2,
        use_proprio=True,
        proprio_dim=4,
        norm_stats=STATS,
        implement_version="official",
        **kw,
    ),
    "oft-rlinf": lambda **kw: OpenVLAOFTConfig.tiny(
        action_dim=4, num_action_chunks=2, norm_stats=STATS, implement_version="rlinf", **kw
    ),
}

OPENPI = {
    "pi0-expert-critic": dict(),
    "pi0-expert-critic-chunk": dict(chunk_critic_input=True),
    "pi05-vlm-critic": dict(pi05=True),
    "pi05-vlm-critic-last-token": dict(pi05=True, value_vlm_mode="last_token"),
    "pi05-expert-critic": dict(pi05=True, value_after_vlm=False),
}


def _randomize_value_head(policy: torch.nn.Module) -> torch.nn.Module:
    """The head's last layer starts at zero (every value 0): give it random weights so values carry signal."""
    with torch.no_grad():
        for p in policy.value_head.parameters():
            p.normal_(0, 0.2)
    return policy.eval()


def _obs(b: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    tasks = ["close the drawer", "press the button from the top", "open the window"]
    return {
        "images": rng.integers(0, 256, (b, 64, 64, 3), dtype=np.uint8),
        "wrist_images": None,
        "states": rng.standard_normal((b, 4)).astype(np.float32),
        "task_descriptions": [tasks[i % 3] for i in range(b)],
    }


@pytest.mark.parametrize("family", list(PRISMATIC))
def test_prismatic_values_equal_greedy_predict(family: str) -> None:
    policy = _randomize_value_head(build_policy(PRISMATIC[family](add_value_head=True)))
    obs = _obs(5)
    want = policy.predict(obs, mode="greedy").values
    calls: list[int] = []
    decode = policy.backbone.decode
    policy.backbone.decode = lambda embeds, *a, **kw: (
        calls.append(embeds.shape[1]),
        decode(embeds, *a, **kw),
    )[1]
    got = policy.values(obs)
    assert got.dtype == torch.float32 and got.shape == (5,)
    assert want.abs().min() > 1e-3 and want.std() > 1e-4  # non-trivial values, different per row
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # one forward; over the prefix alone unless the critic position attends to the slots
    fi = policy.prepare_inputs(obs)
    prefix_len = policy._prefix(fi)[0].shape[1]
    assert len(calls) == 1
    assert (calls[0] > prefix_len) if policy.full_attention else (calls[0] == prefix_len)


@pytest.mark.parametrize("variant", list(OPENPI))
def test_openpi_values_equal_greedy_predict(variant: str) -> None:
    kw = OPENPI[variant]
    torch.manual_seed(0)
    policy = _randomize_value_head(build_policy(OpenPiConfig.tiny(add_value_head=True, **kw)))
    obs = _obs(5)
    want = policy.predict(obs, mode="greedy", generator=torch.Generator().manual_seed(3)).values
    passes: list[int] = []
    expert_pass = policy.expert_pass
    policy.expert_pass = lambda *a, **k: (passes.append(1), expert_pass(*a, **k))[1]
    got = policy.values(obs, generator=torch.Generator().manual_seed(3))
    assert got.dtype == torch.float32 and got.shape == (5,)
    assert want.abs().min() > 1e-3 and want.std() > 1e-4
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # no denoising: the VLM critic needs no expert pass, the expert critic only the step-0 one
    assert len(passes) == (0 if policy.config.critic_after_vlm else 1)


@pytest.mark.parametrize(
    "build",
    [
        lambda **kw: PRISMATIC["openvla"](**kw),
        lambda **kw: PRISMATIC["oft-official"](**kw),
        lambda **kw: OpenPiConfig.tiny(**kw),
    ],
    ids=["openvla", "openvla_oft", "openpi"],
)
def test_values_of_an_empty_batch_and_without_a_value_head(build) -> None:
    with_head = build_policy(build(add_value_head=True))
    empty = with_head.values(_obs(0))
    assert empty.shape == (0,) and empty.dtype == torch.float32
    without = build_policy(build(add_value_head=False))
    assert without.predict(_obs(3), mode="greedy").values is None
    assert torch.equal(without.values(_obs(3)), torch.zeros(3))
