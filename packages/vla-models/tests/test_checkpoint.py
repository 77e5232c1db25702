"""OpenVLA checkpoint layout: names, shards, index, config, round trips, and the timm semantics of the names."""

from __future__ import annotations

import json
import re

import torch
import torch.nn.functional as F

from vla_models import OpenVLAConfig, OpenVLAOFTConfig, PrismaticConfig, build_policy, load_policy
from vla_models.checkpoint_files import read_state_dict
from vla_models.prismatic.openvla_folder import config_from_openvla, openvla_config_fields

STATS = {"bridge": {"action": {"q01": [-0.5] * 4, "q99": [0.5] * 4, "mask": [True, True, True, False]}}}


def test_openvla_layout_and_merged_lora_round_trip(tmp_path, make_obs_fn) -> None:
    policy = build_policy(OpenVLAConfig.tiny(action_dim=4, norm_stats=STATS, is_lora=True, lora_rank=4))
    with torch.no_grad():  # a "trained" adapter, so merging matters
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    obs = make_obs_fn(3)
    out = policy.predict(obs, mode="greedy")
    policy.save_pretrained(tmp_path, max_shard_bytes=1_000_000)

    files = sorted(f.name for f in tmp_path.iterdir())
    shards = [f for f in files if f.endswith(".safetensors")]
    assert len(shards) > 1 and all(re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", f) for f in shards)
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl"))]
    assert {
        "config.json",
        "dataset_statistics.json",
        "model.safetensors.index.json",
        "tokenizer.json",
    } <= set(files)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    names = set(index["weight_map"])
    for expected in (
        "vision_backbone.featurizer.blocks.0.attn.qkv.weight",
        "vision_backbone.featurizer.blocks.1.ls2.scale_factor",
        "vision_backbone.featurizer.reg_token",
        "vision_backbone.fused_featurizer.attn_pool.kv.weight",
        "vision_backbone.fused_featurizer.pos_embed",
        "projector.fc3.bias",
        "language_model.model.layers.1.self_attn.q_proj.weight",
        "language_model.lm_head.weight",
    ):
        assert expected in names, expected
    assert not [n for n in names if "lora" in n or "base_layer" in n or n.startswith("backbone.")]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "openvla" and config["n_action_bins"] == 256
    assert config["text_config"]["vocab_size"] == 1088 and config["norm_stats"] == STATS
    assert json.loads((tmp_path / "dataset_statistics.json").read_text()) == STATS

    loaded = load_policy(tmp_path)
    assert not loaded.config.is_lora
    logp, _, _ = loaded.evaluate(out.forward_inputs)
    torch.testing.assert_close(logp, out.logprobs, atol=1e-4, rtol=1e-4)
    assert torch.equal(loaded.predict(obs, mode="greedy").actions, out.actions)
    # fresh adapters start at B = 0: same function
    relora = load_policy(tmp_path, is_lora=True, add_value_head=True)
    logp2, _, values = relora.evaluate(out.forward_inputs)
    torch.testing.assert_close(logp2, logp, atol=1e-6, rtol=1e-6)
    assert values.shape == (3,)
    # in-place merge for export gives the same function with plain Linear layers
    from peft.tuners.lora import LoraLayer

    policy.merge_lora()
    assert not any(isinstance(m, LoraLayer) for m in policy.modules()) and not policy.config.is_lora
    torch.testing.assert_close(policy.evaluate(out.forward_inputs)[0], out.logprobs, atol=1e-4, rtol=1e-4)


def test_oft_round_trip_is_exact(tmp_path, make_obs_fn) -> None:
    cfg = OpenVLAOFTConfig.tiny(
        action_dim=4, num_action_chunks=3, use_proprio=True, proprio_dim=4, use_film=True, add_value_head=True
    )
    policy = build_policy(cfg)
    out = policy.predict(make_obs_fn(2))
    policy.save_pretrained(tmp_path)
    loaded = load_policy(tmp_path)
    assert loaded.config == cfg.replace(model_path=str(tmp_path), tokenizer="checkpoint")
    logp, ent, values = loaded.evaluate(out.forward_inputs)
    assert (
        torch.equal(logp, out.logprobs) and torch.equal(ent, out.entropy) and torch.equal(values, out.values)
    )


def _timm_vit_features(sd: dict, prefix: str, kind: str, heads: int, patch: int, pixels: torch.Tensor):
    """A from-scratch timm ViT forward (fused qkv, LayerScale ``scale_factor``, DINOv2 ``no_embed_class``) up to
    the second-to-last block, reading OpenVLA-named tensors only."""
    g = lambda k: sd[prefix + k]  # noqa: E731
    x = F.conv2d(pixels, g("patch_embed.proj.weight"), g("patch_embed.proj.bias"), stride=patch)
    x = x.flatten(2).transpose(1, 2) + g("pos_embed")
    b = x.shape[0]
    if kind == "dinov2_reg":
        x = torch.cat([g("cls_token").expand(b, -1, -1), g("reg_token").expand(b, -1, -1), x], dim=1)
    depth = 1 + max(int(k[len(prefix) :].split(".")[1]) for k in sd if k.startswith(prefix + "blocks."))
    d = x.shape[-1]
    for i in range(depth - 1):
        p = f"blocks.{i}."
        h = F.layer_norm(x, (d,), g(p + "norm1.weight"), g(p + "norm1.bias"), eps=1e-6)
        qkv = F.linear(h, g(p + "attn.qkv.weight"), g(p + "attn.qkv.bias"))
        q, k, v = qkv.view(b, -1, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, -1, d)
        a = F.linear(a, g(p + "attn.proj.weight"), g(p + "attn.proj.bias"))
        x = x + (a * g(p + "ls1.scale_factor") if kind == "dinov2_reg" else a)
        h = F.layer_norm(x, (d,), g(p + "norm2.weight"), g(p + "norm2.bias"), eps=1e-6)
        h = F.linear(
            F.gelu(F.linear(h, g(p + "mlp.fc1.weight"), g(p + "mlp.fc1.bias"))),  # exact GELU in both towers
            g(p + "mlp.fc2.weight"),
            g(p + "mlp.fc2.bias"),
        )
        x = x + (h * g(p + "ls2.scale_factor") if kind == "dinov2_reg" else h)
    return x[:, 5:] if kind == "dinov2_reg" else x


def test_saved_names_carry_timm_semantics(tmp_path) -> None:
    policy = build_policy(OpenVLAConfig.tiny(action_dim=4))
    with torch.no_grad():  # make cls/pos/layer-scale non-trivial so a wrong mapping shows
        for n, p in policy.named_parameters():
            if any(s in n for s in ("cls_token", "position_embeddings", "lambda1", "register_tokens")):
                p.normal_(0, 0.5)
    policy.save_pretrained(tmp_path)
    sd = read_state_dict(tmp_path)
    images = torch.randint(0, 256, (2, 64, 64, 3), dtype=torch.uint8)
    with torch.no_grad():
        pix = policy.backbone.pixel_values(images)
        ours = policy.backbone.image_tokens(images)
        feats = []
        for i, (prefix, tcfg) in enumerate(
            zip(
                ("vision_backbone.featurizer.", "vision_backbone.fused_featurizer."),
                policy.config.backbone.vision_towers,
                strict=True,
            )
        ):
            feats.append(_timm_vit_features(sd, prefix, tcfg.kind, tcfg.num_heads, tcfg.patch_size, pix[i]))
        fused = torch.cat(feats, dim=-1)
        ref = F.linear(
            F.gelu(
                F.linear(
                    F.gelu(F.linear(fused, sd["projector.fc1.weight"], sd["projector.fc1.bias"])),
                    sd["projector.fc2.weight"],
                    sd["projector.fc2.bias"],
                )
            ),
            sd["projector.fc3.weight"],
            sd["projector.fc3.bias"],
        )
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-4)


def test_published_config_json_maps_to_openvla_7b() -> None:
    fields = openvla_config_fields(OpenVLAConfig.openvla_7b(norm_stats=STATS))
    cd = config_from_openvla(json.loads(json.dumps(fields)))
    assert cd["backbone"] == PrismaticConfig.openvla_7b()
    assert cd["norm_stats"] == STATS and cd["n_action_bins"] == 256


def test_unused_tower_tensors_may_be_absent_used_ones_may_not(tmp_path, make_obs_fn) -> None:
    """Single-file ``model.safetensors`` without the towers' unused last block / final norm / pooling head
    loads to the same function; a missing tensor that the forward uses is named in the error."""
    import pytest
    from safetensors.torch import save_file

    policy = build_policy(OpenVLAConfig.tiny(action_dim=4))
    out = policy.predict(make_obs_fn(2), mode="greedy")
    policy.save_pretrained(tmp_path)
    sd = read_state_dict(tmp_path)
    for f in tmp_path.glob("model*.safetensors*"):
        f.unlink()
    (tmp_path / "manifest.json").unlink()  # a folder edited by hand: no manifest of ours
    unused = ("featurizer.blocks.1.", "featurizer.norm.", "fused_featurizer.attn_pool.")
    kept = {k: v for k, v in sd.items() if not any(u in k for u in unused)}
    assert len(kept) < len(sd)
    save_file(kept, str(tmp_path / "model.safetensors"))
    loaded = load_policy(tmp_path)
    assert torch.equal(loaded.evaluate(out.forward_inputs)[0], out.logprobs)
    del kept["projector.fc2.weight"]
    save_file(kept, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"missing \['backbone.projector.fc2.weight'\]"):
        load_policy(tmp_path)


def test_value_head_is_dropped_or_initialised_to_match_the_config(tmp_path, make_obs_fn, caplog) -> None:
    """A PPO checkpoint (with a critic) loads as a plain actor with ``add_value_head=False``; an actor-only
    checkpoint loads with a fresh critic (initial values 0) with ``add_value_head=True``; a partial head fails."""
    import logging

    import pytest
    from safetensors.torch import save_file

    critic = build_policy(OpenVLAConfig.tiny(action_dim=4, add_value_head=True))
    with torch.no_grad():  # a "trained" critic: non-zero values
        for p in critic.value_head.parameters():
            p.normal_(0, 0.1)
    out = critic.predict(make_obs_fn(2), mode="greedy")
    assert out.values is not None and out.values.abs().min() > 0
    critic.save_pretrained(tmp_path / "ppo")

    with caplog.at_level(logging.INFO, logger="vla_models.prismatic.checkpoint_prismatic"):
        actor = load_policy(tmp_path / "ppo", add_value_head=False)  # raised "unexpected ['value_head...']"
    assert actor.value_head is None and not actor.config.add_value_head
    assert not [n for n in actor.state_dict() if "value_head" in n]
    assert "dropping the checkpoint's value head" in caplog.text and "value_head.mlp.0.weight" in caplog.text
    logp, _, values = actor.evaluate(out.forward_inputs)
    assert values is None and torch.equal(logp, out.logprobs)
    assert torch.equal(load_policy(tmp_path / "ppo").evaluate(out.forward_inputs)[2], out.values)

    actor.save_pretrained(tmp_path / "actor")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="vla_models.prismatic.checkpoint_prismatic"):
        fresh = load_policy(tmp_path / "actor", add_value_head=True)
    assert "initialised a fresh one" in caplog.text
    logp2, _, values2 = fresh.evaluate(out.forward_inputs)
    assert torch.equal(logp2, out.logprobs) and torch.equal(values2, torch.zeros(2))

    sd = read_state_dict(tmp_path / "ppo")
    for f in (tmp_path / "ppo").glob("model*.safetensors*"):
        f.unlink()
    (tmp_path / "ppo" / "manifest.json").unlink()  # a folder edited by hand: no manifest of ours
    del sd["value_head.mlp.0.weight"]
    save_file(sd, str(tmp_path / "ppo" / "model.safetensors"))
    with pytest.raises(ValueError, match=r"missing \['value_head.mlp.0.weight'\]"):
        load_policy(tmp_path / "ppo")


def test_reference_value_head_layout_loads_or_is_refused(tmp_path, make_obs_fn) -> None:
    """The reference framework's value head: no bias on the last layer (same function as a zero bias) loads;
    its one-value-per-chunk head (action_level) is refused with a message."""
    import pytest
    from safetensors.torch import save_file

    policy = build_policy(OpenVLAOFTConfig.tiny(action_dim=4, add_value_head=True))
    last = len(policy.value_head.mlp) - 1
    with torch.no_grad():
        policy.value_head.mlp[last].weight.normal_()
    obs = make_obs_fn(2)
    values = policy.predict(obs, mode="greedy").values
    assert values.abs().max() > 0
    policy.save_pretrained(tmp_path)
    sd = read_state_dict(tmp_path)
    for f in tmp_path.glob("model*.safetensors*"):
        f.unlink()
    (tmp_path / "manifest.json").unlink()  # a folder edited by hand: no manifest of ours
    del sd[f"value_head.mlp.{last}.bias"]
    save_file(sd, str(tmp_path / "model.safetensors"))
    loaded = load_policy(tmp_path)
    assert torch.equal(loaded.predict(obs, mode="greedy").values, values)
    sd[f"value_head.mlp.{last}.weight"] = torch.zeros(2, sd[f"value_head.mlp.{last}.weight"].shape[1])
    save_file(sd, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"gives 2 values per decision .*action_level"):
        load_policy(tmp_path)
    assert load_policy(tmp_path, add_value_head=False).value_head is None


def test_wrong_tensor_shape_is_one_line_naming_it(tmp_path) -> None:
    import pytest
    from safetensors.torch import save_file

    build_policy(OpenVLAConfig.tiny(action_dim=4)).save_pretrained(tmp_path)
    sd = read_state_dict(tmp_path)
    for f in tmp_path.glob("model*.safetensors*"):
        f.unlink()
    (tmp_path / "manifest.json").unlink()  # a folder edited by hand: no manifest of ours
    sd["projector.fc3.weight"] = torch.zeros(3, 3)
    save_file(sd, str(tmp_path / "model.safetensors"))
    with pytest.raises(
        ValueError, match=r"tensor projector.fc3.weight has shape \[3, 3\], the config needs \[128, 128\]"
    ):
        load_policy(tmp_path)


def test_a_policy_without_lora_never_imports_peft(tmp_path) -> None:
    """peft's import costs seconds at every start: a full-weight policy is built, saved and loaded without it;
    a LoRA policy imports it and is seen as one."""
    import subprocess
    import sys

    code = f"""
import sys
from vla_models import OpenVLAOFTConfig, build_policy, load_policy
from vla_models.lora import has_lora
policy = build_policy(OpenVLAOFTConfig.tiny(action_dim=4, norm_stats={STATS!r}))
policy.save_pretrained({str(tmp_path)!r})
again = load_policy({str(tmp_path)!r})
assert not has_lora(again) and "peft" not in sys.modules, sorted(m for m in sys.modules if "peft" in m)
lora = build_policy(OpenVLAOFTConfig.tiny(action_dim=4, norm_stats={STATS!r}, is_lora=True, lora_rank=4))
assert "peft" in sys.modules and has_lora(lora)
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
