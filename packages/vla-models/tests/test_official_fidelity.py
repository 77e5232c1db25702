"""Published OpenVLA / OpenVLA-OFT folders load through the public API and reproduce the official code's outputs.

The folders under ``official_vla/`` were written by the official code (tiny random widths, real geometry and
Llama-2 tokenizer); ``expected.npz`` holds the official outputs and ``official_vla/README.md`` the tolerances
(``fixture.json`` repeats them), which are above the official-vs-official float noise it measured.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from vla_models import load_policy

ROOT = Path(__file__).parent / "official_vla"
_TOL = json.loads((ROOT / "fixture.json").read_text())["tolerances_abs"]
LOGITS_TOL = _TOL[
    "logits (action_bin_logits, rlinf_action_bin_logits) and log-probs/entropy derived from them"
]
PIXEL_TOL = _TOL["pixel_values"]
PROPRIO_TOL = _TOL["proprio_normalized"]
ACTION_TOL = _TOL["actions (OpenVLA, OFT discrete: from tokens)"]
L1_TOL = _TOL["actions_l1"]
HIDDEN_TOL = _TOL["actions_hidden_states"]
OFT = dict(model_type="openvla_oft", num_images_in_input=2, action_dim=7, num_action_chunks=8)


def _case(name: str) -> tuple[dict, dict, dict]:
    inputs = dict(np.load(ROOT / name / "inputs.npz"))
    expected = dict(np.load(ROOT / name / "expected.npz"))
    meta = json.loads((ROOT / name / "inputs.json").read_text())
    return inputs, expected, meta


def _obs(inputs: dict, meta: dict) -> dict:
    return {
        "images": inputs["images"],
        "wrist_images": inputs.get("wrist_images"),
        "states": inputs.get("states"),
        "task_descriptions": meta["instructions"],
    }


def _max_dev(a: torch.Tensor, b: np.ndarray) -> float:
    return float((a.detach().double() - torch.as_tensor(b).double()).abs().max())


def _check_prompts(policy, expected: dict, meta: dict) -> None:
    for i, instruction in enumerate(meta["instructions"]):
        n = int(expected["model_input_lengths"][i])
        # the model inserts BOS itself; the processor's ids are the rest, 29871 included
        assert expected["model_input_ids"][i, 0] == 1
        assert policy.processor.prompt_ids(instruction) == expected["model_input_ids"][i, 1:n].tolist()


def _check_logprobs(policy, out, logits: np.ndarray) -> None:
    """``evaluate`` recomputes ``predict``'s numbers exactly, and they are the official distribution's."""
    logp, ent, _ = policy.evaluate(out.forward_inputs)
    assert torch.equal(logp, out.logprobs) and torch.equal(ent, out.entropy)
    ref = torch.log_softmax(torch.as_tensor(logits).double(), -1)
    offsets = policy.action_tokenizer.token_ids_to_offsets(out.forward_inputs["action_tokens"].flatten(1))
    ref_logp = ref.gather(-1, offsets.unsqueeze(-1)).squeeze(-1)
    ref_ent = -(ref.exp() * ref).sum(-1)
    assert _max_dev(logp.flatten(1), ref_logp.numpy()) < LOGITS_TOL
    assert _max_dev(ent.flatten(1), ref_ent.numpy()) < LOGITS_TOL


@pytest.fixture(scope="module")
def openvla():
    inputs, expected, meta = _case("openvla")
    policy = load_policy(ROOT / "openvla" / "checkpoint", unnorm_key=meta["unnorm_key"], precision="fp32")
    return policy, inputs, expected, meta


def test_openvla_reproduces_the_official_processor_and_decoding(openvla) -> None:
    policy, inputs, expected, meta = openvla
    towers = policy.config.backbone.vision_towers  # sized from the tensors, not the 7B ids in config.json
    assert [(t.hidden_size, t.num_layers, t.num_heads) for t in towers] == [(128, 3, 2), (144, 3, 2)]
    assert policy.config.backbone.text.rms_norm_eps == 1e-6  # config.json omits it: LlamaConfig's default
    _check_prompts(policy, expected, meta)
    pix = policy.backbone.pixel_values(torch.as_tensor(inputs["images"]))  # [tower, B, 3, S, S]
    assert _max_dev(pix.permute(1, 0, 2, 3, 4).flatten(1, 2), expected["pixel_values"]) <= PIXEL_TOL

    out = policy.predict(_obs(inputs, meta), mode="greedy")
    tokens = out.forward_inputs["action_tokens"].view(4, 7).numpy()
    np.testing.assert_array_equal(tokens, expected["generated_action_token_ids"])
    assert _max_dev(out.actions.view(4, 7), expected["actions"]) < ACTION_TOL
    assert _max_dev(policy.action_bin_logits(out.forward_inputs), expected["action_bin_logits"]) < LOGITS_TOL
    _check_logprobs(policy, out, expected["action_bin_logits"])


def test_eager_attention_equals_sdpa(openvla) -> None:
    """The additive float mask reaches every attention implementation (transformers' eager path would add a
    boolean mask as 0/1, i.e. ignore it)."""
    policy, inputs, expected, meta = openvla
    eager = load_policy(
        ROOT / "openvla" / "checkpoint",
        unnorm_key=meta["unnorm_key"],
        precision="fp32",
        attn_implementation="eager",
    )
    out = eager.predict(_obs(inputs, meta), mode="greedy")
    np.testing.assert_array_equal(
        out.forward_inputs["action_tokens"].view(4, 7).numpy(), expected["generated_action_token_ids"]
    )
    sdpa = policy.evaluate(out.forward_inputs)[0]
    assert float((out.logprobs - sdpa.detach()).abs().max()) < LOGITS_TOL
    assert _max_dev(eager.action_bin_logits(out.forward_inputs), expected["action_bin_logits"]) < LOGITS_TOL


@pytest.fixture(scope="module")
def oft_case():
    return _case("openvla_oft")


def test_oft_official_layout_l1_head_and_discrete_tokens(oft_case) -> None:
    inputs, expected, meta = oft_case
    folder = ROOT / "openvla_oft" / "checkpoint"
    common = dict(OFT, unnorm_key=meta["unnorm_key"], precision="fp32", use_proprio=True, proprio_dim=8)
    policy = load_policy(folder, implement_version="official", action_head="l1", **common)
    _check_prompts(policy, expected, meta)
    obs = _obs(inputs, meta)
    images = torch.cat(
        [torch.as_tensor(inputs["images"])[:, None], torch.as_tensor(inputs["wrist_images"])], 1
    )
    pix = policy.backbone.pixel_values(images.flatten(0, 1)).permute(1, 0, 2, 3, 4).flatten(1, 2)
    assert _max_dev(pix.reshape(4, 12, 224, 224), expected["pixel_values"]) <= PIXEL_TOL
    states = torch.as_tensor(inputs["states"])
    assert _max_dev(policy.normalized_states(states), expected["proprio_normalized"]) < PROPRIO_TOL

    out = policy.predict(obs, mode="greedy")
    assert _max_dev(out.actions, expected["actions_l1"]) < L1_TOL
    logits = policy.action_bin_logits(out.forward_inputs)
    assert _max_dev(logits, expected["action_bin_logits"]) < LOGITS_TOL
    with torch.no_grad():
        hidden = policy.action_hidden_states(out.forward_inputs)
    assert _max_dev(hidden, expected["actions_hidden_states"]) < HIDDEN_TOL
    with pytest.raises(ValueError, match="action_head='l1'"):
        policy.predict(obs, mode="sample")

    discrete = load_policy(folder, implement_version="official", **common)  # RL decodes tokens
    out = discrete.predict(obs, mode="greedy")
    tokens = out.forward_inputs["action_tokens"].view(4, 56).numpy()
    np.testing.assert_array_equal(tokens, expected["discrete_action_token_ids"])
    assert _max_dev(out.actions, expected["actions_discrete"]) < ACTION_TOL
    _check_logprobs(discrete, out, expected["action_bin_logits"])


def test_oft_rlinf_layout(oft_case) -> None:
    inputs, expected, meta = oft_case
    folder = ROOT / "openvla_oft" / "checkpoint"
    policy = load_policy(
        folder,
        implement_version="rlinf",
        use_proprio=False,
        unnorm_key=meta["unnorm_key"],
        precision="fp32",
        **OFT,
    )
    out = policy.predict(_obs(inputs, meta), mode="greedy")
    assert (
        _max_dev(policy.action_bin_logits(out.forward_inputs), expected["rlinf_action_bin_logits"])
        < LOGITS_TOL
    )
    _check_logprobs(policy, out, expected["rlinf_action_bin_logits"])
    sampled = policy.predict(
        _obs(inputs, meta), mode="sample", temperature=1.6, generator=torch.Generator().manual_seed(0)
    )
    logp, ent, _ = policy.evaluate(sampled.forward_inputs)
    assert torch.equal(logp, sampled.logprobs) and torch.equal(ent, sampled.entropy)
    with pytest.raises(ValueError, match="use_proprio=True is invalid with implement_version='rlinf'"):
        load_policy(folder, implement_version="rlinf", use_proprio=True, unnorm_key=meta["unnorm_key"], **OFT)


def test_settings_the_folder_contradicts_and_broken_files_are_named(tmp_path, oft_case) -> None:
    _, _, meta = oft_case
    key = dict(unnorm_key=meta["unnorm_key"], precision="fp32")
    folder = ROOT / "openvla_oft" / "checkpoint"
    with pytest.raises(ValueError, match=r"proprio_dim=7 contradicts the checkpoint .* proprio_dim=8"):
        load_policy(folder, use_proprio=True, proprio_dim=7, **OFT, **key)
    with pytest.raises(ValueError, match=r"hidden_size=128 contradicts .* hidden_size=64"):
        load_policy(folder, hidden_size=128, **OFT, **key)
    with pytest.raises(FileNotFoundError, match=r"use_film=True needs .*vision_backbone--\*_checkpoint.pt"):
        load_policy(folder, use_film=True, **OFT, **key)
    with pytest.raises(ValueError, match=r"n_action_bins=128 contradicts .* n_action_bins=256"):
        load_policy(ROOT / "openvla" / "checkpoint", n_action_bins=128, unnorm_key="bridge_orig")
    with pytest.raises(ValueError, match="action_dim=6 does not match the statistics"):
        load_policy(ROOT / "openvla" / "checkpoint", action_dim=6, unnorm_key="bridge_orig")

    broken = tmp_path / "broken"
    shutil.copytree(ROOT / "openvla" / "checkpoint", broken)
    (broken / "config.json").write_text('{"text_config": ')
    with pytest.raises(ValueError, match=r"config.json is not valid JSON"):
        load_policy(broken)
    (broken / "config.json").write_text((ROOT / "openvla" / "checkpoint" / "config.json").read_text())
    (broken / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"has no tokenizer \(tokenizer.json or tokenizer.model\)"):
        load_policy(broken)
    (broken / "model-00002-of-00005.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"model-00002-of-00005.safetensors \(listed in"):
        load_policy(broken)


def test_oft_bounds_normalization_uses_min_max(oft_case) -> None:
    """normalization_type="bounds": OpenVLA-OFT's BOUNDS scheme, ``[min, max]`` with its ``+1e-8``."""
    inputs, _, meta = oft_case
    folder = ROOT / "openvla_oft" / "checkpoint"
    stats = json.loads((folder / "dataset_statistics.json").read_text())[meta["unnorm_key"]]
    policy = load_policy(
        folder,
        normalization_type="bounds",
        use_proprio=True,
        unnorm_key=meta["unnorm_key"],
        precision="fp32",
        **OFT,
    )
    states = inputs["states"].astype(np.float64)
    lo, hi = np.array(stats["proprio"]["min"]), np.array(stats["proprio"]["max"])
    mask = np.array(stats["proprio"].get("mask", np.ones_like(lo, dtype=bool)))
    ref = np.clip(np.where(mask, 2 * (states - lo) / (hi - lo + 1e-8) - 1, states), -1, 1)
    assert _max_dev(policy.normalized_states(torch.as_tensor(inputs["states"])), ref) < PROPRIO_TOL
    out = policy.predict(_obs(inputs, meta), mode="greedy")
    norm = (
        policy.action_tokenizer.token_ids_to_normalized(out.forward_inputs["action_tokens"]).double().numpy()
    )
    lo, hi = np.array(stats["action"]["min"]), np.array(stats["action"]["max"])
    mask = np.array(stats["action"].get("mask", np.ones_like(lo, dtype=bool)))
    ref = np.where(mask, 0.5 * (norm + 1) * (hi - lo + 1e-8) + lo, norm)
    assert _max_dev(out.actions, ref) < ACTION_TOL
