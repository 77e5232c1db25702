"""LoRA on the language model through peft, merging it back for export, and peft adapter folders
(``lora_path``) on top of a base checkpoint."""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from vla_models.checkpoint_files import read_json
from vla_models.safetensors_writer import Deferred

LM_LORA_TARGETS = r".*layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"


def _lora_layers(module: nn.Module) -> list[tuple[str, Any]]:
    """(name, layer) of every peft LoRA layer in `module`. peft is imported only where LoRA is injected (its
    import costs seconds): without it loaded no module can hold a LoRA layer."""
    if "peft.tuners.lora" not in sys.modules:
        return []
    from peft.tuners.lora import LoraLayer

    return [(name, m) for name, m in module.named_modules() if isinstance(m, LoraLayer)]


def apply_lora(
    language_model: nn.Module, *, rank: int, alpha: int | None = None, dropout: float = 0.0
) -> nn.Module:
    """Inject LoRA adapters (``lora_A`` random, ``lora_B`` zero: the function is unchanged) into the decoder's
    attention and MLP projections, and freeze every other parameter of ``language_model``.

    Args:
        language_model: the Llama ``LlamaForCausalLM``.
        rank: LoRA rank.
        alpha: LoRA alpha (default ``rank``... scale 1).
        dropout: LoRA dropout.
    """
    from peft import LoraConfig, inject_adapter_in_model

    cfg = LoraConfig(r=rank, lora_alpha=alpha or rank, lora_dropout=dropout, target_modules=LM_LORA_TARGETS)
    model = inject_adapter_in_model(cfg, language_model)
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    return model


def has_lora(module: nn.Module) -> bool:
    return bool(_lora_layers(module))


def merged_state_dict(module: nn.Module) -> dict[str, torch.Tensor]:
    """State dict with every LoRA delta added into its base weight and the adapter tensors removed.

    The module itself is not modified (``W + scale * B @ A`` is computed per layer). Every merged weight exists at
    once: to write them, use :func:`deferred_merged_state_dict` (one at a time).
    """
    sd = deferred_merged_state_dict(module)
    return {k: v.compute() if isinstance(v, Deferred) else v for k, v in sd.items()}


def deferred_merged_state_dict(module: nn.Module) -> dict[str, torch.Tensor | Deferred]:
    """:func:`merged_state_dict` with each merged weight :class:`Deferred` (computed when written); the other
    entries are the module's own tensors (no copy)."""
    sd: dict[str, torch.Tensor | Deferred] = {
        k: v for k, v in module.state_dict().items() if "lora_" not in k
    }
    for name, m in _lora_layers(module):
        if "default" in m.lora_A:
            key = f"{name}.base_layer.weight"
            base = sd[key]
            assert isinstance(base, torch.Tensor)

            def merged(m: Any = m, base: torch.Tensor = base) -> torch.Tensor:
                with torch.no_grad():
                    return base + m.get_delta_weight("default").to(base.dtype)

            sd[key] = Deferred(tuple(base.shape), base.dtype, merged)
    return {k.replace(".base_layer.", "."): v for k, v in sd.items()}


def merge_lora_(module: nn.Module) -> nn.Module:
    """Merge LoRA into the base layers in place and replace each LoRA wrapper by its base ``nn.Linear``."""
    for name, m in _lora_layers(module):
        m.merge()
        parent_name, _, child = name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        setattr(parent, child, m.get_base_layer())
    return module


@dataclass
class LoraAdapter:
    """A peft LoRA adapter folder: per module (named as in the base checkpoint, without ``.weight``) its
    ``lora_A [r, in, ...]`` and ``lora_B [out, r, ...]``; the delta is ``scale * B @ A``."""

    rank: int
    alpha: float
    scale: float
    modules: dict[str, tuple[torch.Tensor, torch.Tensor]]

    def delta(self, name: str, shape: torch.Size) -> torch.Tensor:
        """``scale * B @ A`` of module ``name`` in float32, shaped like its weight (Linear or Conv2d)."""
        a, b = self.modules[name]
        d = b.float().flatten(1) @ a.float().flatten(1)
        return (self.scale * d).view(shape)


def read_lora_adapter(path: str | Path) -> LoraAdapter:
    """Read a peft adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``; pickled
    ``adapter_model.bin`` is refused). Keys lose peft's ``base_model.model.`` prefix and adapter name."""
    p = Path(path)
    cfg_file, weights = p / "adapter_config.json", p / "adapter_model.safetensors"
    if not p.is_dir():
        raise FileNotFoundError(f"lora_path {p} does not exist")
    if not cfg_file.is_file():
        raise FileNotFoundError(f"lora_path {p} has no adapter_config.json (not a peft adapter folder)")
    if not weights.is_file():
        raise FileNotFoundError(f"lora_path {p} has no adapter_model.safetensors (only safetensors are read)")
    cfg = read_json(cfg_file, expect=dict)
    if cfg.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"{cfg_file}: peft_type={cfg.get('peft_type')!r} is not supported; allowed: 'LORA'")
    for key in ("use_dora", "rank_pattern", "alpha_pattern"):
        if cfg.get(key):
            raise ValueError(f"{cfg_file}: {key}={cfg[key]!r} is not supported")
    rank, alpha = int(cfg["r"]), float(cfg.get("lora_alpha", cfg["r"]))
    scale = alpha / math.sqrt(rank) if cfg.get("use_rslora") else alpha / rank
    tensors = load_file(str(weights))
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for k, v in tensors.items():
        m = re.fullmatch(r"(?:base_model\.model\.)?(.+)\.(lora_[AB])(?:\.default)?\.weight", k)
        if m is None:
            raise ValueError(f"{weights}: tensor {k} is not a LoRA A/B weight")
        pairs.setdefault(m.group(1), {})[m.group(2)] = v
    modules = {}
    for name, ab in pairs.items():
        if set(ab) != {"lora_A", "lora_B"}:
            raise ValueError(f"{weights}: module {name} lacks {sorted({'lora_A', 'lora_B'} - set(ab))}")
        modules[name] = (ab["lora_A"], ab["lora_B"])
    return LoraAdapter(rank=rank, alpha=alpha, scale=scale, modules=modules)


def is_language_model_target(name: str) -> bool:
    """Whether a base-checkpoint module name is one of the projections ``apply_lora`` adapts."""
    return name.startswith("language_model.") and re.fullmatch(LM_LORA_TARGETS, name) is not None


def merge_adapter_into(
    state_dict: dict[str, torch.Tensor], adapter: LoraAdapter, names: list[str] | None = None
) -> None:
    """Add ``scale * B @ A`` to the weights of ``names`` (default: every adapted module) in a state dict with
    the base checkpoint's names; merged weights are float32 (cast on loading)."""
    for name in adapter.modules if names is None else names:
        key = f"{name}.weight"
        if key not in state_dict:
            raise ValueError(f"the LoRA adapter adapts {name}, which the checkpoint does not have ({key})")
        w = state_dict[key]
        state_dict[key] = w.float() + adapter.delta(name, w.shape)


def load_adapter_weights(module: nn.Module, adapter: LoraAdapter, names: list[str], *, prefix: str) -> None:
    """Copy the adapter's A/B of ``names`` into the peft layers of ``module`` (``<prefix><name>.lora_X``)."""
    params = dict(module.named_parameters())
    with torch.no_grad():
        for name in names:
            for which, t in zip(("lora_A", "lora_B"), adapter.modules[name], strict=True):
                key = f"{prefix}{name}.{which}.default.weight"
                if key not in params or params[key].shape != t.shape:
                    have = tuple(params[key].shape) if key in params else None
                    raise ValueError(
                        f"LoRA weight {name}.{which} {tuple(t.shape)} does not fit the model ({have})"
                    )
                params[key].copy_(t)
