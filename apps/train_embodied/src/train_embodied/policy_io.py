"""`actor.model` section -> a vla_models policy (built tiny, or loaded from `model_path`), and its optimizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from train_embodied.config.sections import ModelSection, OptimSection
from vla_models import Policy, rl_parameters


def model_config(section: ModelSection, env_spec: dict[str, Any] | None = None) -> Any:
    """The vla_models typed config of a tiny policy described by `section` (`extra` keys pass through), made by
    the section's model family."""
    from vla_models import get_family

    action_dim = int(env_spec["action_dim"]) if env_spec else section.action_dim
    if action_dim != section.action_dim:
        raise ValueError(
            f"actor.model.action_dim={section.action_dim} does not match the env's action_dim={action_dim}"
        )
    return get_family(section.model_type).config_from_settings(section.settings())


def load_settings(section: ModelSection) -> dict[str, Any]:
    """Every `actor.model` setting as `vla_models.load_policy` keywords (made by the section's model family):
    the architecture keys, which the checkpoint must agree with (a contradiction is an error naming the key),
    and the run's own keys (LoRA, value head, precision, un-normalisation key, `extra`)."""
    from vla_models import get_family

    return get_family(section.model_type).load_settings(section.settings())


def build_policy_for_run(
    section: ModelSection, env_spec: dict[str, Any] | None, *, device: Any = "cpu"
) -> Policy:
    """Load `section.model_path` (a save_pretrained folder, a published OpenVLA folder or an OpenVLA-OFT training
    folder) or build a random tiny policy.

    A loaded checkpoint keeps its architecture (a setting it contradicts is an error); a value head is added when
    `add_value_head` asks for one and the checkpoint has none (e.g. PPO from an SFT checkpoint trained without a
    critic). On the CPU, half-precision weights compute their products in float32 where the CPU has no native
    half-precision GEMM (`vla_models.cpu_float32_products`).
    """
    from vla_models import build_policy, cpu_float32_products, load_policy

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
    policy = policy.to(device)
    if torch.device(device).type == "cpu":
        # bf16 / fp16 weights on a CPU without native half-precision GEMM: products in float32 (3x forward,
        # far more in backward), weights kept in their dtype
        cpu_float32_products(policy)
    return policy


def frozen_copy(policy: Policy) -> Policy:
    """A copy of `policy` that does not train (no gradients, eval mode): the KL penalty's reference policy.

    It costs one more set of weights on the actor's device (no gradients or optimizer state)."""
    import copy

    reference = copy.deepcopy(policy)
    reference.requires_grad_(False)
    return reference.eval()


def _saved_value_head(path: str) -> bool:
    """Whether the checkpoint folder at `path` holds a value head (config.json `vla_models.add_value_head`)."""
    import json

    config = Path(path) / "config.json"
    if not config.exists():
        return False
    return bool(json.loads(config.read_text()).get("vla_models", {}).get("add_value_head", False))


def select_proprio(obs: dict[str, Any], section: ModelSection) -> dict[str, Any]:
    """The observation the policy sees: `states` cut to its first `proprio_dim` entries.

    MetaWorld states are 39-d (hand xyz, gripper, object poses, goal); the proprio input of the tiny policy is
    the robot's own part (the first 4), as in the CPU prototype, so the task must be read from the image.
    """
    from vla_models import get_family

    states = obs.get("states")
    if not section.use_proprio and not get_family(section.model_type).states_without_proprio:
        return {**obs, "states": None}  # a policy without state input (e.g. pi0.5's MetaWorld preset)
    if not section.use_proprio or states is None or states.shape[-1] == section.proprio_dim:
        return obs
    if states.shape[-1] < section.proprio_dim:
        raise ValueError(
            f"actor.model.proprio_dim={section.proprio_dim} exceeds the env's state size {states.shape[-1]}"
        )
    return {**obs, "states": states[..., : section.proprio_dim]}


def build_optimizer(policy: torch.nn.Module, optim: OptimSection) -> torch.optim.Optimizer:
    """AdamW with `lr` for the policy and `value_lr` for the value head's parameters: those the RL loss trains
    (`vla_models.rl_parameters`: requiring grad, not a head only SFT trains), so no state for any other."""
    value, rest = [], []
    for name, param in rl_parameters(policy):
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
def policy_values(policy: Policy, obs: dict[str, Any]) -> torch.Tensor:
    """V(obs) float32 [B] from the policy's prefix forward (`policy.values`); zeros for a policy without a value
    head and for an empty batch (a rank receives one when the rows to value are fewer than the ranks)."""
    return policy.values(obs)
