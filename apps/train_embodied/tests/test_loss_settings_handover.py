"""The `algorithm` section hands the loss its settings by name: every field of `vla_algos.LossSettings` is a key of
the section, under the same name and with the same default, and a value set in the YAML reaches the loss as set."""

from __future__ import annotations

import dataclasses

from train_embodied.config import load_train_config
from train_embodied.config.sections import AlgorithmSection
from vla_algos import LossSettings


def test_every_loss_setting_is_an_algorithm_key_with_the_same_default() -> None:
    section = {f.name: f for f in dataclasses.fields(AlgorithmSection)}
    for f in dataclasses.fields(LossSettings):
        assert f.name in section, f"LossSettings.{f.name} is not an algorithm key"
        assert section[f.name].default == f.default, f.name
    assert LossSettings.from_config(AlgorithmSection()) == LossSettings()


def test_values_set_on_the_command_line_reach_the_loss_settings_unrenamed() -> None:
    overrides = {
        "clip_ratio_low": 0.1,
        "clip_ratio_high": 0.28,
        "clip_ratio_c": 3.0,
        "clip_log_ratio_min": -5.0,
        "clip_log_ratio_max": 5.0,
        "entropy_bonus": 0.01,
        "kl_beta": 0.05,
        "kl_penalty": "low_var_kl",
        "value_clip": 0.3,
        "value_clip_mode": "clipped",
        "huber_delta": 2.0,
        "value_loss_coef": 0.7,
        "logprob_type": "action_level",
        "entropy_type": "chunk_level",
    }
    assert set(overrides) == {f.name for f in dataclasses.fields(LossSettings)}
    tc = load_train_config(
        "metaworld_ppo_tiny_cpu", [f"algorithm.{k}={v}" for k, v in overrides.items()], check_paths=False
    )
    assert LossSettings.from_config(tc.algorithm) == LossSettings(**overrides)
