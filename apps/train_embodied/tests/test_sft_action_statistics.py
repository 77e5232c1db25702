"""vla-sft bins demo actions that leave [-1, 1] (RoboTwin's joint positions in radians) over the demos' statistics,
and the saved policy keeps them: without them a policy built from scratch could only act in [-1, 1]."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from train_embodied.config import load_train_config
from train_embodied.policy_io import model_config
from train_embodied.sft import demo_norm_stats


def _joint_actions(n: int, seed: int = 0) -> np.ndarray:
    """[n, 14] RoboTwin-like actions: 6 joints in radians (one never moving) + a gripper in {0, 1}, per arm."""
    rng = np.random.default_rng(seed)
    arm = rng.uniform([-0.5, -0.3, -2.2, 0.0, 1.9, -1.0], [0.5, 0.8, -1.6, 0.0, 2.6, 2.8], size=(n, 2, 6))
    grip = rng.integers(0, 2, size=(n, 2, 1)).astype(float)
    return np.concatenate([arm, grip], axis=2).reshape(n, 14).astype(np.float32)


def test_statistics_map_the_bins_onto_the_demo_actions_and_survive_a_save(tmp_path: Path) -> None:
    from vla_models import build_policy, load_policy

    tc = load_train_config("robotwin_ppo_tiny_cpu", [], check_paths=False)
    actions = _joint_actions(400)
    stats = demo_norm_stats(tc, actions, actions)
    assert stats is not None and list(stats) == ["press_stapler"]
    action_stats = stats["press_stapler"]["action"]
    assert all(action_stats["mask"]) and np.all(np.asarray(action_stats["q99"]) > action_stats["q01"])
    # a joint the demos never move still gets a range (normalising an off value stays finite)
    assert action_stats["q99"][3] - action_stats["q01"][3] == pytest.approx(1e-2)
    policy = build_policy(dataclasses.replace(model_config(tc.actor.model), norm_stats=stats))
    acts = torch.as_tensor(actions[:8]).view(2, 4, 14)
    tokens = policy.action_tokenizer.normalized_to_token_ids(policy.action_normalizer.normalize(acts))
    decoded = policy._decode_actions(tokens)
    width = (np.asarray(action_stats["q99"]) - action_stats["q01"]) / 255
    inside = (actions[:8] >= action_stats["q01"]) & (actions[:8] <= action_stats["q99"])
    err = np.abs(decoded.view(8, 14).numpy() - actions[:8])
    assert (err[inside] <= np.broadcast_to(width, err.shape)[inside] + 1e-6).all()
    policy.save_pretrained(str(tmp_path / "policy"))
    loaded = load_policy(str(tmp_path / "policy"))
    torch.testing.assert_close(loaded._decode_actions(tokens), decoded)


def test_actions_inside_the_unit_box_keep_the_plain_bins_and_other_families_are_refused() -> None:
    tc = load_train_config("metaworld_ppo_tiny_cpu", [], check_paths=False)
    inside = np.random.default_rng(0).uniform(-1, 1, size=(50, 4)).astype(np.float32)
    assert demo_norm_stats(tc, inside, inside) is None
    pi0 = load_train_config("metaworld_ppo_pi0_tiny_cpu", [], check_paths=False)
    with pytest.raises(ValueError, match="openvla_oft"):
        demo_norm_stats(pi0, 3 * inside, inside)
