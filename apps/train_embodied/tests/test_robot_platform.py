"""`ROBOT_PLATFORM=ALOHA` (the RoboTwin guide's export) selects what the official OpenVLA-OFT code selects with it:
action and proprio normalisation by the [min, max] bounds of `dataset_statistics.json`, instead of [q01, q99].

Checked on the official-layout OFT checkpoint folder of the vla-models fixtures, whose statistics have min/max
different from q01/q99, through the app's config and policy loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from train_embodied.config import ConfigError, load_train_config
from train_embodied.policy_io import build_policy_for_run

OFT_FOLDER = Path(__file__).parents[3] / "packages/vla-models/tests/official_vla/openvla_oft/checkpoint"
KEY = "libero_object_no_noops"
OVERRIDES = [
    f"actor.model.model_path={OFT_FOLDER}",
    "actor.model.num_images_in_input=2",
    "actor.model.use_proprio=true",
    "actor.model.proprio_dim=8",
    f"actor.model.unnorm_key={KEY}",
    "actor.model.implement_version=official",
    "actor.model.is_lora=false",
    "actor.model.precision=fp32",
]


def _policy(monkeypatch, platform: str | None, *extra: str):
    if platform is None:
        monkeypatch.delenv("ROBOT_PLATFORM", raising=False)
    else:
        monkeypatch.setenv("ROBOT_PLATFORM", platform)
    tc = load_train_config("libero_10_grpo_openvlaoft", [*OVERRIDES, *extra], check_paths=False)
    return tc, build_policy_for_run(tc.actor.model, None)


def _stats() -> dict:
    return json.loads((OFT_FOLDER / "dataset_statistics.json").read_text())[KEY]


@pytest.mark.skipif(not OFT_FOLDER.is_dir(), reason="the official-layout fixtures are not checked out")
def test_aloha_selects_min_max_bounds_and_default_is_q01_q99(monkeypatch) -> None:
    stats = _stats()
    act, prop = stats["action"], stats["proprio"]
    assert act["min"] != act["q01"] and prop["max"] != prop["q99"]  # the fixture tells the two apart
    x = torch.linspace(-1.0, 1.0, 7).reshape(1, 7)
    state = torch.tensor([prop["mean"]], dtype=torch.float32)
    for platform, (low, high) in (("ALOHA", ("min", "max")), (None, ("q01", "q99"))):
        tc, policy = _policy(monkeypatch, platform)
        if platform:
            assert tc.actor.model.extra["normalization_type"] == "bounds"
        a_lo, a_hi = torch.tensor(act[low]), torch.tensor(act[high])
        mask = torch.tensor(act["mask"], dtype=torch.bool)
        # the official un-normalisation: 0.5 * (a + 1) * (high - low + 1e-8) + low where masked
        expected = torch.where(mask, 0.5 * (x + 1.0) * (a_hi - a_lo + 1e-8) + a_lo, x)
        torch.testing.assert_close(policy.action_normalizer.unnormalize(x), expected)
        p_lo, p_hi = torch.tensor(prop[low]), torch.tensor(prop[high])
        expected_state = (2.0 * (state - p_lo) / (p_hi - p_lo + 1e-8) - 1.0).clamp(-1.0, 1.0)
        torch.testing.assert_close(policy.proprio_normalizer.normalize(state), expected_state)


def test_platform_and_config_that_disagree_are_refused(monkeypatch) -> None:
    monkeypatch.setenv("ROBOT_PLATFORM", "ALOHA")
    with pytest.raises(
        ConfigError, match=r"normalization_type='bounds_q99' conflicts with ROBOT_PLATFORM=ALOHA"
    ):
        load_train_config(
            "libero_10_grpo_openvlaoft",
            ["+actor.model.extra.normalization_type=bounds_q99"],
            check_paths=False,
        )
    monkeypatch.setenv("ROBOT_PLATFORM", "FRANKA")
    with pytest.raises(ConfigError, match=r"ROBOT_PLATFORM='FRANKA' is not one of: ALOHA, LIBERO, BRIDGE"):
        load_train_config("libero_10_grpo_openvlaoft", check_paths=False)


def test_robotwin_oft_config_is_the_same_with_or_without_aloha(monkeypatch) -> None:
    monkeypatch.setenv("ROBOT_PLATFORM", "ALOHA")
    aloha = load_train_config("robotwin_place_empty_cup_grpo_openvlaoft", check_paths=False)
    monkeypatch.delenv("ROBOT_PLATFORM")
    plain = load_train_config("robotwin_place_empty_cup_grpo_openvlaoft", check_paths=False)
    assert aloha.actor.model.extra == plain.actor.model.extra == {"normalization_type": "bounds"}
