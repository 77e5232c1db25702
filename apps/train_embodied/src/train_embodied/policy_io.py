"""`actor.model` section -> a vla_models policy (built tiny, or loaded from `model_path`), and its optimizer."""

from __future__ import annotations

from typing import Any

import torch

from train_embodied.config.sections import ModelSection, OptimSection


def _oft_settings(section: ModelSection) -> dict[str, Any]:
    """The OpenVLA-OFT keys of `section` (proprio_dim only where a proprio input exists)."""
    out: dict[str, Any] = dict(
        use_proprio=section.use_proprio,
        num_images_in_input=section.num_images_in_input,
        use_film=section.use_film,
        action_head=section.action_head,
    )
    if section.use_proprio:
        out["proprio_dim"] = section.proprio_dim
    if section.implement_version is not None:
        out["implement_version"] = section.implement_version
    return out


def model_config(section: ModelSection, env_spec: dict[str, Any] | None = None) -> Any:
    """The vla_models typed config of a tiny policy described by `section` (`extra` keys pass through)."""
    from vla_models.openvla.configuration_openvla import OpenVLAConfig
    from vla_models.openvla_oft.configuration_openvla_oft import OpenVLAOFTConfig

    action_dim = int(env_spec["action_dim"]) if env_spec else section.action_dim
    if action_dim != section.action_dim:
        raise ValueError(
            f"actor.model.action_dim={section.action_dim} does not match the env's action_dim={action_dim}"
        )
    if section.model_type == "openpi":
        return _openpi_config(section)
    common: dict[str, Any] = dict(
        action_dim=section.action_dim,
        num_action_chunks=section.num_action_chunks,
        n_action_bins=section.n_action_bins,
        unnorm_key=section.unnorm_key,
        add_value_head=section.add_value_head,
        is_lora=section.is_lora,
        lora_rank=section.lora_rank,
        precision=section.precision,
    )
    extra = dict(section.extra)
    sizes = {k: extra.pop(k) for k in ("patch_size", "hidden_size") if k in extra}
    if section.model_type == "openvla_oft":
        common.update(_oft_settings(section))
        common.setdefault("proprio_dim", section.proprio_dim)
        return OpenVLAOFTConfig.tiny(image_size=section.image_size, **sizes, **common, **extra)
    return OpenVLAConfig.tiny(image_size=section.image_size, **sizes, **common, **extra)


def _openpi_fields(section: ModelSection) -> dict[str, Any]:
    """`actor.model` as vla_models OpenPiConfig fields: the flat keys, then the `openpi` / `OpenPI` section
    (which wins for `num_images_in_input`), then `extra`."""
    fields: dict[str, Any] = dict(
        action_dim=section.action_dim,
        num_action_chunks=section.num_action_chunks,
        add_value_head=section.add_value_head,
        precision=section.precision,
        num_images_in_input=section.num_images_in_input,
    )
    fields.update(section.openpi_settings())
    fields.update(section.extra)
    return fields


def _openpi_config(section: ModelSection) -> Any:
    from vla_models import config_from_dict

    fields = _openpi_fields(section)
    stats = fields.pop("norm_stats_path", None)
    if stats is not None:
        from vla_models.openpi.processing_openpi import read_norm_stats

        fields["norm_stats"] = read_norm_stats(stats)
    size = "tiny" if section.size == "tiny" else "pi0_base"
    extra = {"image_size": section.image_size} if size == "tiny" else {}
    return config_from_dict({"model_type": "openpi", "size": size, **extra, **fields})


def load_settings(section: ModelSection) -> dict[str, Any]:
    """Every `actor.model` setting as `vla_models.load_policy` keywords: the architecture keys, which the
    checkpoint must agree with (a contradiction is an error naming the key), and the run's own keys (LoRA,
    value head, precision, un-normalisation key, `extra`)."""
    if section.model_type == "openpi":
        fields = _openpi_fields(section)
        fields.pop("add_value_head")
        return dict(model_type="openpi", image_size=section.image_size, **fields)
    settings: dict[str, Any] = dict(
        model_type=section.model_type,
        action_dim=section.action_dim,
        num_action_chunks=section.num_action_chunks,
        n_action_bins=section.n_action_bins,
        image_size=section.image_size,
        is_lora=section.is_lora,
        lora_rank=section.lora_rank,
        precision=section.precision,
        unnorm_key=section.unnorm_key,
    )
    if section.model_type == "openvla_oft":
        settings.update(_oft_settings(section))
    if section.lora_path:
        settings["lora_path"] = section.lora_path
    settings.update(section.extra)
    return settings


def build_policy_for_run(
    section: ModelSection, env_spec: dict[str, Any] | None, *, device: Any = "cpu"
) -> Any:
    """Load `section.model_path` (a save_pretrained folder, a published OpenVLA folder or an OpenVLA-OFT training
    folder) or build a random tiny policy.

    A loaded checkpoint keeps its architecture (a setting it contradicts is an error); a value head is added when
    `add_value_head` asks for one and the checkpoint has none (e.g. PPO from an SFT checkpoint trained without a
    critic).
    """
    from vla_models import build_policy, load_policy

    if section.model_path:
        if env_spec and int(env_spec["action_dim"]) != section.action_dim:
            raise ValueError(
                f"actor.model.action_dim={section.action_dim} does not match the env's "
                f"action_dim={env_spec['action_dim']}"
            )
        try:
            policy = load_policy(
                section.model_path,
                # keep a saved value head (unused without a critic loss) so the saved folder round-trips
                add_value_head=section.add_value_head or _saved_value_head(section.model_path),
                **load_settings(section),
            )
        except ValueError as e:  # the keys vla_models names are those of this section
            raise ValueError(f"actor.model: {e}") from None
    else:
        if section.size == "full":
            raise ValueError("actor.model.size='full' needs actor.model.model_path (a checkpoint folder)")
        policy = build_policy(model_config(section, env_spec))
    return policy.to(device)


def _saved_value_head(path: str) -> bool:
    """Whether the checkpoint folder at `path` holds a value head (config.json `vla_models.add_value_head`)."""
    import json
    from pathlib import Path

    config = Path(path) / "config.json"
    if not config.exists():
        return False
    return bool(json.loads(config.read_text()).get("vla_models", {}).get("add_value_head", False))


def select_proprio(obs: dict[str, Any], section: ModelSection) -> dict[str, Any]:
    """The observation the policy sees: `states` cut to its first `proprio_dim` entries.

    MetaWorld states are 39-d (hand xyz, gripper, object poses, goal); the proprio input of the tiny policy is
    the robot's own part (the first 4), as in the CPU prototype, so the task must be read from the image.
    """
    states = obs.get("states")
    if section.model_type == "openpi" and not section.use_proprio:
        return {**obs, "states": None}  # a policy without state input (e.g. pi0.5's MetaWorld preset)
    if not section.use_proprio or states is None or states.shape[-1] == section.proprio_dim:
        return obs
    if states.shape[-1] < section.proprio_dim:
        raise ValueError(
            f"actor.model.proprio_dim={section.proprio_dim} exceeds the env's state size {states.shape[-1]}"
        )
    return {**obs, "states": states[..., : section.proprio_dim]}


def build_optimizer(policy: torch.nn.Module, optim: OptimSection) -> torch.optim.Optimizer:
    """AdamW with `lr` for the policy and `value_lr` for the value head's parameters."""
    value, rest = [], []
    for name, param in policy.named_parameters():
        if param.requires_grad:
            (value if "value_head" in name else rest).append(param)
    groups = [{"params": rest, "lr": optim.lr, "name": "policy"}]
    if value:
        groups.append({"params": value, "lr": optim.value_lr, "name": "value_head"})
    optimizer = torch.optim.AdamW(
        groups, betas=tuple(optim.adam_betas), eps=optim.adam_eps, weight_decay=optim.weight_decay
    )
    init_optimizer_state(optimizer)
    return optimizer


def init_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Create the state of every parameter now (a zero-gradient step with lr 0, as torch.distributed.checkpoint
    does for its load template), so that parameters that never receive a gradient (e.g. an unused mask token)
    still have optimizer state in checkpoints and resuming finds every key."""
    lrs = [g["lr"] for g in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"] = 0.0
        for p in group["params"]:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    for group, lr in zip(optimizer.param_groups, lrs):
        group["lr"] = lr


@torch.no_grad()
def policy_values(policy: Any, obs: dict[str, Any]) -> torch.Tensor:
    """V(obs) float32 [B] from the policy's prefix forward (`policy.values`); zeros for a policy without a value
    head and for an empty batch (a rank receives one when the rows to value are fewer than the ranks)."""
    return policy.values(obs)
