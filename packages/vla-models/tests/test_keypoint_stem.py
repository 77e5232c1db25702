"""The ``keypoints`` vision stem of the tiny Prismatic backbone: it reports where things are in the picture, a
policy built on it learns an action that only an object's position decides, and its folders load back."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vla_models import PrismaticConfig, build_policy, config_from_dict, load_policy
from vla_models.prismatic.modeling_prismatic import KeypointStem, PrismaticBackbone
from vla_models.prismatic.openvla_folder import BACKBONE_KEYS


def _dot_images(rows: np.ndarray, cols: np.ndarray, size: int) -> torch.Tensor:
    images = torch.zeros(len(rows), size, size, 3, dtype=torch.uint8)
    for i, (r, c) in enumerate(zip(rows, cols, strict=True)):
        images[i, r - 1 : r + 2, c - 1 : c + 2] = 255
    return images


def test_each_keypoint_is_the_expected_position_of_its_map() -> None:
    """A stem whose one map is the red channel's brightness (scaled) puts its keypoint on a red dot: x is the
    column, y the row, both in [-1, 1] over the image."""
    cfg = PrismaticConfig.tiny(image_size=32, vision_stem="keypoints")
    stem = KeypointStem(cfg.vision_towers[0])
    with torch.no_grad():
        for p in stem.parameters():
            p.zero_()
        first, last = stem.conv[0], stem.conv[-1]
        first.weight[0, 0, 2, 2] = 1.0  # the centre tap of the red channel, into channel 0
        for layer in stem.conv[2:-1:2]:  # the 3x3 convolutions pass channel 0 on through their centre tap
            layer.weight[0, 0, 1, 1] = 1.0
        last.weight[0, 0, 0, 0] = 50.0  # map 0 = 50 x red: the softmax peaks on the dot
        rows, cols = np.array([5, 20, 28]), np.array([25, 3, 16])
        pixels = _dot_images(rows, cols, 32).permute(0, 3, 1, 2).float() / 255.0
        points = stem(pixels)
    assert points.shape == (3, 1, cfg.vision_towers[0].hidden_size)
    x, y = points[:, 0, 0], points[:, 0, 1]
    torch.testing.assert_close(x, torch.as_tensor(-1 + 2 * cols / 31, dtype=torch.float32), atol=2e-3, rtol=0)
    torch.testing.assert_close(y, torch.as_tensor(-1 + 2 * rows / 31, dtype=torch.float32), atol=2e-3, rtol=0)


def test_a_keypoint_policy_learns_an_action_the_objects_position_decides() -> None:
    """Behaviour cloning of "move towards the dot" (the action is the dot's column and row, nothing else tells
    them): held-out pictures' greedy actions land within a few bins of the truth."""
    size = 32
    cfg = config_from_dict(
        dict(
            model_type="openvla_oft",
            size="tiny",
            image_size=size,
            vision_stem="keypoints",
            action_dim=2,
            use_proprio=False,
            add_value_head=False,
            n_action_bins=32,
        )
    )
    policy = build_policy(cfg)
    rng = np.random.default_rng(0)

    def batch(n: int) -> tuple[dict, torch.Tensor]:
        rows, cols = rng.integers(2, size - 2, n), rng.integers(2, size - 2, n)
        obs = {
            "images": _dot_images(rows, cols, size).numpy(),
            "wrist_images": None,
            "states": np.zeros((n, 4), np.float32),
            "task_descriptions": ["move to the dot"] * n,
        }
        target = torch.as_tensor(np.stack([cols, rows], 1) / (size - 1) * 2 - 1, dtype=torch.float32)
        return obs, target[:, None]

    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    for _ in range(200):
        obs, target = batch(32)
        loss, _ = policy.sft_loss(obs, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    obs, target = batch(64)
    error = (policy.predict(obs, mode="greedy").actions[:, 0] - target[:, 0]).abs()
    assert float(error.mean()) < 0.15, float(error.mean())  # a guess at the centre: 0.5 on average


def test_keypoint_folders_load_back_and_refuse_what_they_are_not(tmp_path, make_obs_fn) -> None:
    cfg = config_from_dict(
        dict(model_type="openvla_oft", size="tiny", vision_stem="keypoints", action_dim=4, proprio_dim=4)
    )
    assert (
        cfg.backbone.vision_stem == "keypoints" and BACKBONE_KEYS["vision_stem"](cfg.backbone) == "keypoints"
    )
    policy = build_policy(cfg)
    obs = make_obs_fn(3)
    out = policy.predict(obs, mode="greedy")
    policy.save_pretrained(tmp_path)
    again = load_policy(tmp_path)
    assert torch.equal(again.predict(obs, mode="greedy").actions, out.actions)
    with pytest.raises(ValueError, match="vision_stem='vit' contradicts the checkpoint"):
        load_policy(tmp_path, vision_stem="vit")
    with pytest.raises(ValueError, match="patch_size=16 is a ViT's setting"):
        config_from_dict(dict(model_type="openvla_oft", size="tiny", vision_stem="keypoints", patch_size=16))
    with pytest.raises(
        ValueError, match=r"vision_stem='conv' is not supported; allowed: \('vit', 'keypoints'\)"
    ):
        PrismaticConfig.tiny(vision_stem="conv")
    with pytest.raises(ValueError, match="use_film"):
        PrismaticBackbone(cfg.backbone, use_film=True)
