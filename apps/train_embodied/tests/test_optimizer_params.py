"""The RL optimizer holds state only for what the RL loss trains: with LoRA, OpenVLA-OFT's L1 regression head
(trained by SFT's L1 loss, never reached by the token log-probs) gets none, while the adapters, the value head and
every other parameter that requires grad get theirs."""

from __future__ import annotations

import torch

from train_embodied.config.sections import OptimSection
from train_embodied.policy_io import build_optimizer
from vla_models import OpenVLAOFTConfig, build_policy, rl_parameters


def test_rl_optimizer_holds_no_state_for_the_l1_head() -> None:
    torch.manual_seed(0)
    cfg = OpenVLAOFTConfig.tiny(action_dim=4, action_head="l1", add_value_head=True, is_lora=True)
    policy = build_policy(cfg)
    l1 = {id(p) for p in policy.l1_head.parameters()}
    assert l1 and all(p.requires_grad for p in policy.l1_head.parameters())  # SFT trains it
    opt = build_optimizer(policy, OptimSection(lr=1e-3, value_lr=1e-3))
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    assert not held & l1
    assert not {id(p) for p in opt.state} & l1
    names = {n for n, _ in rl_parameters(policy)}
    assert any("lora_" in n for n in names) and any(n.startswith("value_head.") for n in names)
    trainable = {id(p) for p in policy.parameters() if p.requires_grad}
    assert held == trainable - l1  # everything else that requires grad is there
