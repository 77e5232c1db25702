"""FiLM: an OpenVLA-OFT FiLM checkpoint (``vision_backbone--*.pt``, built to the official format: wrapped blocks,
LoRA-split Linears and patch conv, alpha = min(r, 16)) loads from a published folder, and the image tokens equal
the official formula computed from scratch: in every block ``x = x + ls1(attn(norm1(x)))``,
``x = x * (1 + scale(l)) + shift(l)``, ``x = x + ls2(mlp(norm2(x)))``, with ``l`` the mean input embedding of
``[BOS, prompt ..., 29871, STOP]``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from vla_models import load_policy
from vla_models.checkpoint_files import read_state_dict

FOLDER = Path(__file__).parent / "official_vla" / "openvla_oft" / "checkpoint"
TOWERS = {
    "vision_backbone.featurizer.": ("dinov2_reg", 64),
    "vision_backbone.fused_featurizer.": ("siglip", 72),
}
LINEARS = ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")
RANK = 32  # official alpha = min(32, 16): scale 0.5


def _film_checkpoint(sd: dict, g: torch.Generator) -> tuple[dict, dict]:
    """(the .pt content, the effective tower weights + FiLM projections it stands for)."""
    side, effective = {}, {}
    llm_dim = sd["language_model.model.embed_tokens.weight"].shape[1]
    for prefix in TOWERS:
        names = [k for k in sd if k.startswith(prefix)]
        depth = 1 + max(
            int(k[len(prefix) :].split(".")[1]) for k in names if ".blocks." in "." + k[len(prefix) :]
        )
        for k in names:
            rest, t = k[len(prefix) :], sd[k].float()
            wrapped = rest
            if rest.startswith("blocks."):
                i, tail = rest.split(".", 2)[1:]
                wrapped = f"blocks.{i}.block.{tail}"
            module = rest.rsplit(".", 1)[0]
            split = module.split(".", 2)[-1] in LINEARS or module == "patch_embed.proj"
            if split and rest.endswith(".weight"):
                a = torch.randn(RANK, *t.shape[1:], generator=g) * 0.02
                b = torch.randn(t.shape[0], RANK, *([1, 1] if t.ndim == 4 else []), generator=g) * 0.02
                base = prefix + wrapped.rsplit(".", 1)[0]
                side[f"{base}.base_layer.weight"] = sd[k]
                side[f"{base}.lora_A.default.weight"] = a.to(torch.bfloat16)
                side[f"{base}.lora_B.default.weight"] = b.to(torch.bfloat16)
                a, b = a.to(torch.bfloat16).float(), b.to(torch.bfloat16).float()
                effective[k] = t + 0.5 * (b.flatten(1) @ a.flatten(1)).view_as(t)
            elif split:
                side[prefix + wrapped.replace(".bias", ".base_layer.bias")] = sd[k]
                effective[k] = t
            else:
                side[prefix + wrapped] = sd[k]
                effective[k] = t
        dv = sd[prefix + "pos_embed"].shape[-1]
        for i in range(depth):
            for which in ("scale", "shift"):
                w = torch.randn(dv, llm_dim, generator=g) * 0.05
                bias = torch.randn(dv, generator=g) * 0.05
                side[f"{prefix}blocks.{i}.{which}.weight"], side[f"{prefix}blocks.{i}.{which}.bias"] = w, bias
                (
                    effective[f"{prefix}blocks.{i}.{which}.weight"],
                    effective[f"{prefix}blocks.{i}.{which}.bias"],
                ) = w, bias
    return side, effective


def _film_tower(sd: dict, prefix: str, pixels: torch.Tensor, lang: torch.Tensor) -> torch.Tensor:
    """timm ViT forward with OpenVLA-OFT's FiLM, up to the second-to-last block, patch tokens only."""
    kind, head_dim = TOWERS[prefix]
    g = lambda k: sd[prefix + k]  # noqa: E731
    w = g("patch_embed.proj.weight")
    x = F.conv2d(pixels, w, g("patch_embed.proj.bias"), stride=w.shape[-1]).flatten(2).transpose(1, 2)
    x = x + g("pos_embed")
    b, d = x.shape[0], x.shape[-1]
    if kind == "dinov2_reg":
        x = torch.cat([g("cls_token").expand(b, -1, -1), g("reg_token").expand(b, -1, -1), x], dim=1)
    heads = d // head_dim
    depth = 1 + max(int(k[len(prefix) :].split(".")[1]) for k in sd if k.startswith(prefix + "blocks."))
    for i in range(depth - 1):
        p = f"blocks.{i}."

        def ls(t: torch.Tensor, n: str, p: str = p) -> torch.Tensor:
            return t * g(p + n + ".scale_factor") if kind == "dinov2_reg" else t

        h = F.layer_norm(x, (d,), g(p + "norm1.weight"), g(p + "norm1.bias"), eps=1e-6)
        q, k, v = (
            F.linear(h, g(p + "attn.qkv.weight"), g(p + "attn.qkv.bias"))
            .view(b, -1, 3, heads, head_dim)
            .permute(2, 0, 3, 1, 4)
        )
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, -1, d)
        x = x + ls(F.linear(a, g(p + "attn.proj.weight"), g(p + "attn.proj.bias")), "ls1")
        gamma = F.linear(lang, g(p + "scale.weight"), g(p + "scale.bias"))[:, None]
        beta = F.linear(lang, g(p + "shift.weight"), g(p + "shift.bias"))[:, None]
        x = x * (1 + gamma) + beta
        h = F.layer_norm(x, (d,), g(p + "norm2.weight"), g(p + "norm2.bias"), eps=1e-6)
        h = F.linear(
            F.gelu(F.linear(h, g(p + "mlp.fc1.weight"), g(p + "mlp.fc1.bias"))),
            g(p + "mlp.fc2.weight"),
            g(p + "mlp.fc2.bias"),
        )
        x = x + ls(h, "ls2")
    return x[:, 5:] if kind == "dinov2_reg" else x


def test_film_checkpoint_loads_and_follows_the_official_formula(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    folder = tmp_path / "film"
    shutil.copytree(FOLDER, folder)
    sd = read_state_dict(FOLDER)
    side, eff = _film_checkpoint(sd, torch.Generator().manual_seed(0))
    torch.save(side, folder / "vision_backbone--150000_checkpoint.pt")
    policy = load_policy(
        folder,
        model_type="openvla_oft",
        use_film=True,
        use_proprio=True,
        num_images_in_input=2,
        implement_version="official",
        unnorm_key="libero_object_no_noops",
        precision="fp32",
    )
    inputs = np.load(FOLDER.parent / "inputs.npz")
    meta = json.loads((FOLDER.parent / "inputs.json").read_text())
    obs = {
        "images": inputs["images"][:2],
        "wrist_images": inputs["wrist_images"][:2],
        "states": inputs["states"][:2],
        "task_descriptions": meta["instructions"][:2],
    }
    fi = policy.prepare_inputs(obs)
    with torch.no_grad():
        prefix, _ = policy._prefix(fi)  # [BOS][main image][wrist image][proprio][prompt]
        pix = policy.backbone.pixel_values(fi["images"].flatten(0, 1))
    embed = sd["language_model.model.embed_tokens.weight"].float()
    lang = []
    for i in range(2):
        ids = [1, *policy.processor.prompt_ids(meta["instructions"][i]), 2]  # BOS, prompt ... 29871, STOP
        lang.append(embed[ids].mean(0))
    lang = torch.stack(lang).repeat_interleave(2, dim=0)  # the same l for both cameras
    eff.update({k: v.float() for k, v in sd.items() if not k.startswith(tuple(TOWERS))})
    feats = torch.cat([_film_tower(eff, p, pix[t], lang) for t, p in enumerate(TOWERS)], dim=-1)
    proj = F.linear(
        F.gelu(F.linear(feats, eff["projector.fc1.weight"], eff["projector.fc1.bias"])),
        eff["projector.fc2.weight"],
        eff["projector.fc2.bias"],
    )
    ref = F.linear(F.gelu(proj), eff["projector.fc3.weight"], eff["projector.fc3.bias"]).view(2, 512, -1)
    assert float((prefix[:, 1:513] - ref).abs().max()) < 1e-4
    plain = load_policy(
        folder,
        model_type="openvla_oft",
        use_film=False,
        use_proprio=True,
        num_images_in_input=2,
        unnorm_key="libero_object_no_noops",
        precision="fp32",
    )
    with torch.no_grad():
        assert float((plain._prefix(fi)[0][:, 1:513] - ref).abs().max()) > 1e-2  # FiLM and the .pt matter
