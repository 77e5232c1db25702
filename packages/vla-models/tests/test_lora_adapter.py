"""``lora_path``: a peft adapter folder (peft's saved format) on top of a published OpenVLA folder, merged or
kept as trainable LoRA; both equal the checkpoint with ``W + (alpha / r) * B @ A`` written into it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from vla_models import load_policy
from vla_models.checkpoint_files import read_state_dict

FOLDER = Path(__file__).parent / "official_vla" / "openvla" / "checkpoint"
RANK, ALPHA = 4, 8
MODULES = {  # module -> weight shape, as peft's "all-linear" names them on the official model
    "language_model.model.layers.0.self_attn.q_proj": (64, 64),
    "language_model.model.layers.1.mlp.down_proj": (64, 172),
    "vision_backbone.featurizer.blocks.0.attn.qkv": (384, 128),
    "vision_backbone.fused_featurizer.patch_embed.proj": (144, 3, 14, 14),
    "projector.fc1": (1088, 272),
}


def _adapter(path: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    ab, tensors = {}, {}
    for name, shape in MODULES.items():
        a = torch.randn(RANK, *shape[1:], generator=g) * 0.05
        b = torch.randn(shape[0], RANK, *([1, 1] if len(shape) == 4 else []), generator=g) * 0.05
        ab[name] = (a, b)
        tensors[f"base_model.model.{name}.lora_A.weight"] = a
        tensors[f"base_model.model.{name}.lora_B.weight"] = b
    path.mkdir()
    save_file(tensors, str(path / "adapter_model.safetensors"))
    config = {"peft_type": "LORA", "r": RANK, "lora_alpha": ALPHA, "target_modules": "all-linear"}
    (path / "adapter_config.json").write_text(json.dumps(config))
    return ab


def _merged_folder(path: Path, ab: dict) -> None:
    """The base folder with every adapted weight replaced by ``W + (alpha / r) * B @ A`` (float32)."""
    shutil.copytree(FOLDER, path, ignore=shutil.ignore_patterns("model*.safetensors*"))
    sd = {k: v.float() for k, v in read_state_dict(FOLDER).items()}
    for name, (a, b) in ab.items():
        w = sd[f"{name}.weight"]
        sd[f"{name}.weight"] = w + (ALPHA / RANK) * (b.flatten(1) @ a.flatten(1)).view_as(w)
    save_file(sd, str(path / "model.safetensors"))


def _logits(policy) -> torch.Tensor:
    inputs = np.load(FOLDER.parent / "inputs.npz")
    meta = json.loads((FOLDER.parent / "inputs.json").read_text())
    obs = {"images": inputs["images"][:2], "task_descriptions": meta["instructions"][:2]}
    with torch.no_grad():
        return policy.action_bin_logits(policy.prepare_inputs(obs))


def test_lora_path_merged_or_kept(tmp_path: Path) -> None:
    ab = _adapter(tmp_path / "adapter")
    _merged_folder(tmp_path / "merged", ab)
    kw = dict(unnorm_key="bridge_orig", precision="fp32")
    reference = _logits(load_policy(tmp_path / "merged", **kw))
    assert float((reference - _logits(load_policy(FOLDER, **kw))).abs().max()) > 1e-2  # the adapter matters

    merged = load_policy(FOLDER, lora_path=tmp_path / "adapter", **kw)
    assert float((_logits(merged) - reference).abs().max()) < 1e-5

    kept = load_policy(FOLDER, lora_path=tmp_path / "adapter", is_lora=True, **kw)
    assert float((_logits(kept) - reference).abs().max()) < 1e-4  # unmerged: another summation order
    trainable = {n for n, p in kept.named_parameters() if p.requires_grad}
    q_b = "backbone.language_model.model.layers.0.self_attn.q_proj.lora_B.default.weight"
    assert q_b in trainable and torch.equal(
        dict(kept.named_parameters())[q_b].detach(), ab["language_model.model.layers.0.self_attn.q_proj"][1]
    )
    assert not any(
        "vision_backbone" in n for n in trainable
    )  # the tower's adapter was merged into the frozen base

    with pytest.raises(ValueError, match=r"lora_rank=8 contradicts .* lora_rank=4"):
        load_policy(FOLDER, lora_path=tmp_path / "adapter", is_lora=True, lora_rank=8, **kw)
    with pytest.raises(FileNotFoundError, match=r"no adapter_config\.json"):
        load_policy(FOLDER, lora_path=tmp_path / "merged", **kw)
