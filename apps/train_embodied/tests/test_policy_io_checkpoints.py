"""`actor.model` keys reach vla_models.load_policy; a setting the checkpoint contradicts is an error naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from train_embodied.config.sections import ModelSection
from train_embodied.policy_io import build_policy_for_run

pytestmark = pytest.mark.usefixtures("one_thread")

OFT_FOLDER = Path(__file__).parents[3] / "packages/vla-models/tests/official_vla/openvla_oft/checkpoint"


def _published(**changes) -> ModelSection:
    keys = dict(
        model_type="openvla_oft",
        size="full",
        model_path=str(OFT_FOLDER),
        action_dim=7,
        num_action_chunks=8,
        image_size=224,
        use_proprio=True,
        proprio_dim=8,
        num_images_in_input=2,
        implement_version="official",
        unnorm_key="libero_object_no_noops",
        add_value_head=False,
    )
    keys.update(changes)
    return ModelSection(**keys)


def test_reference_keys_reach_the_published_oft_folder() -> None:
    policy = build_policy_for_run(_published(action_head="l1"), {"action_dim": 7})
    cfg = policy.config
    assert (cfg.family, cfg.implement_version, cfg.num_images_in_input, cfg.proprio_dim) == (
        "openvla_oft",
        "official",
        2,
        8,
    )
    assert policy.l1_head is not None and policy.proprio_projector is not None
    rlinf = build_policy_for_run(_published(implement_version="rlinf", use_proprio=False), None)
    assert rlinf.config.implement_version == "rlinf" and rlinf.proprio_projector is None


def test_contradicting_settings_name_key_and_both_values(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"actor.model: proprio_dim=7 contradicts .* proprio_dim=8"):
        build_policy_for_run(_published(proprio_dim=7), None)
    with pytest.raises(ValueError, match=r"actor.model: image_size=64 contradicts .* image_size=224"):
        build_policy_for_run(_published(image_size=64), None)
    tiny = ModelSection(image_size=32, extra={"patch_size": 16, "hidden_size": 64})
    build_policy_for_run(tiny, None).save_pretrained(tmp_path / "tiny")
    saved = dict(
        model_path=str(tmp_path / "tiny"), image_size=32, extra={"patch_size": 16, "hidden_size": 64}
    )
    loaded = build_policy_for_run(ModelSection(**saved), None)
    assert loaded.config.implement_version == "causal_prefix"
    with pytest.raises(ValueError, match=r"num_action_chunks=2 contradicts .* num_action_chunks=1"):
        build_policy_for_run(ModelSection(**saved, num_action_chunks=2), None)
    with pytest.raises(ValueError, match=r"use_proprio=False contradicts .* use_proprio=True"):
        build_policy_for_run(ModelSection(**saved, use_proprio=False), None)
    with pytest.raises(ValueError, match=r"hidden_size=128 contradicts .* hidden_size=64"):
        build_policy_for_run(ModelSection(**{**saved, "extra": {"patch_size": 16, "hidden_size": 128}}), None)


def test_openvla_refuses_oft_only_keys() -> None:
    errors = ModelSection(model_type="openvla", use_proprio=True, num_images_in_input=2).check("actor.model")
    assert (
        "actor.model.use_proprio=True is invalid with model_type='openvla' (read by model_type openpi, "
        "openvla_oft only; allowed: False)" in errors
    )
    assert any(e.startswith("actor.model.num_images_in_input=2 is invalid") for e in errors)
    errors = ModelSection(implement_version="rlinf", use_proprio=True).check("actor.model")
    assert any("use_proprio=True is invalid with implement_version='rlinf'" in e for e in errors)


def _pi0_section(**changes) -> ModelSection:
    keys = dict(
        model_type="openpi",
        size="tiny",
        action_dim=4,
        num_action_chunks=4,
        image_size=64,
        num_steps=3,
        openpi={
            "action_horizon": 4,
            "noise_method": "flow_cps",
            "value_after_vlm": True,
            "max_token_len": 16,
        },
        extra={"patch_size": 16},
    )
    keys.update(changes)
    return ModelSection(**keys)


def test_pi0_section_builds_saves_and_loads_with_its_keys(tmp_path: Path) -> None:
    policy = build_policy_for_run(_pi0_section(), {"action_dim": 4})
    cfg = policy.config
    assert (cfg.num_steps, cfg.noise_method, cfg.action_horizon, cfg.sizes.patch_size) == (
        3,
        "flow_cps",
        4,
        16,
    )
    assert cfg.critic_after_vlm and policy.value_head is not None
    policy.save_pretrained(str(tmp_path / "pi0"))
    # the run's RL keys override the folder's (noise method), architecture keys must agree
    loaded = build_policy_for_run(
        _pi0_section(model_path=str(tmp_path / "pi0"), OpenPI={"noise_method": "flow_sde"}), {"action_dim": 4}
    )
    assert loaded.config.noise_method == "flow_sde" and loaded.config.num_steps == 3
    for k, v in policy.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k
    with pytest.raises(ValueError, match=r"actor\.model: image_size=32 contradicts"):
        build_policy_for_run(_pi0_section(model_path=str(tmp_path / "pi0"), image_size=32), {"action_dim": 4})


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_cpu_policy_multiplies_bf16_weights_in_float32_where_the_cpu_lacks_bf16(precision: str) -> None:
    from vla_models.cpu_products import Float32ProductLinear, native_half_products

    section = ModelSection(precision=precision, image_size=32, extra={"patch_size": 16, "hidden_size": 64})
    policy = build_policy_for_run(section, None)
    # plain Linear layers (MultiheadAttention's out_proj, a subclass whose weight it reads directly, is not one)
    plain = (torch.nn.Linear, Float32ProductLinear)
    half = [m for m in policy.modules() if type(m) in plain and m.weight.dtype == torch.bfloat16]
    switched = [m for m in policy.modules() if type(m) is Float32ProductLinear]
    assert bool(half) is (precision == "bf16")
    if native_half_products(torch.bfloat16):
        assert switched == []
    else:
        assert switched == half  # every bf16 Linear, LoRA's base and adapter layers among them
