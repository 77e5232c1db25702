"""Folders written by lerobot 0.6.1's own pi0 / pi0.5 code load as lerobot meant them.

The fixtures under ``fixtures/lerobot_pi/`` (tiny sizes, random weights) and the actions lerobot's pipeline
returned for fixed inputs and a fixed initial noise were written by ``fixtures/lerobot_pi/make_fixtures.py`` in
lerobot's own environment; a plain ``load_policy(folder)`` must reproduce those actions.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vla_models import load_policy

FIXTURES = Path(__file__).parent / "fixtures" / "lerobot_pi"


def _expected(name: str) -> tuple[dict, dict[str, torch.Tensor]]:
    folder = FIXTURES / name
    rec = load_file(str(folder / "expected.safetensors"))
    images = rec["images"]
    obs = {
        "images": images[:, 0],
        "wrist_images": images[:, 1:],
        "states": rec["states"],
        "task_descriptions": json.loads((folder / "tasks.json").read_text()),
    }
    return obs, rec


@pytest.mark.parametrize("name", ["pi0", "pi05"])
def test_plain_load_reproduces_lerobot_actions(name: str) -> None:
    obs, rec = _expected(name)
    policy = load_policy(str(FIXTURES / name))
    cfg = policy.config
    recorded = json.loads((FIXTURES / name / "config.json").read_text())
    # every recorded setting is read
    assert cfg.pi05 is (name == "pi05")
    assert cfg.precision == "fp32" and policy.dtype == torch.float32
    assert cfg.num_steps == recorded["num_inference_steps"] == 3
    assert cfg.action_horizon == recorded["chunk_size"]
    assert cfg.num_action_chunks == recorded["n_action_steps"]
    assert cfg.action_dim == recorded["output_features"]["action"]["shape"][0]
    assert cfg.num_images_in_input == 3  # base, wrist and lerobot's empty camera
    assert cfg.token_len == recorded["tokenizer_max_length"]
    assert cfg.quantile_norm is (name == "pi05") and cfg.norm_style == "lerobot"
    assert cfg.sizes.image_size == recorded["image_resolution"][0]
    # the same initial noise lerobot integrated from
    seed = int(rec["seed"])
    assert torch.equal(
        torch.randn(rec["noise"].shape, generator=torch.Generator().manual_seed(seed)), rec["noise"]
    )
    out = policy.predict(obs, mode="greedy", generator=torch.Generator().manual_seed(seed))
    assert out.actions.shape == rec["actions"].shape
    err = (out.actions - rec["actions"]).abs().max()
    assert err <= 1e-4, f"max |ours - lerobot| = {err:.2e}"
    # the statistics come from lerobot's normaliser files (without them the actions are off by units)
    assert policy.state_normalizer is not None and policy.action_normalizer is not None
    assert (out.actions - policy.action_normalizer.normalize(out.actions)).abs().max() > 0.5


def test_recorded_settings_contradicted_by_an_override_are_named() -> None:
    folder = str(FIXTURES / "pi0")
    with pytest.raises(ValueError, match=r"num_steps=10 contradicts the lerobot folder .* num_steps=3"):
        load_policy(folder, num_steps=10)
    with pytest.raises(ValueError, match=r"precision='bf16' contradicts the lerobot folder"):
        load_policy(folder, precision="bf16")
    with pytest.raises(ValueError, match=r"action_dim=7 contradicts the lerobot folder .* action_dim=5"):
        load_policy(folder, action_dim=7)
    # the same values as the folder's are fine
    assert load_policy(folder, num_steps=3, action_dim=5).config.num_steps == 3


def test_unsupported_lerobot_settings_are_refused_by_name(tmp_path) -> None:
    cases = {
        "use_relative_actions": True,
        "min_period": 0.01,
        "n_obs_steps": 2,
        "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "QUANTILES"},
        "a_future_key": 1,
    }
    for key, value in cases.items():
        folder = tmp_path / key
        shutil.copytree(FIXTURES / "pi0", folder)
        d = json.loads((folder / "config.json").read_text())
        d[key] = value
        (folder / "config.json").write_text(json.dumps(d))
        with pytest.raises(ValueError, match=key):
            load_policy(str(folder))


def test_a_folder_without_tokenizer_says_how_to_name_one(tmp_path) -> None:
    folder = tmp_path / "pi0"
    shutil.copytree(FIXTURES / "pi0", folder)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (folder / f).unlink()
    with pytest.raises(FileNotFoundError, match=r"google/paligemma-3b-pt-224.*set tokenizer="):
        load_policy(str(folder))
    obs, rec = _expected("pi0")
    policy = load_policy(str(folder), tokenizer=str(FIXTURES / "pi0"))
    out = policy.predict(obs, mode="greedy", generator=torch.Generator().manual_seed(int(rec["seed"])))
    assert (out.actions - rec["actions"]).abs().max() <= 1e-4
