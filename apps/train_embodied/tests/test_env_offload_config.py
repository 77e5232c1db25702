"""`env.enable_offload` (the guides' key) and the reference's per-split `env.train.enable_offload` /
`env.eval.enable_offload`: where each lands, and the one-line refusals (a simulator that cannot be offloaded, a
value that is not a boolean, both spellings with different values)."""

from __future__ import annotations

import pytest

from train_embodied.config import ConfigError, load_train_config


def _load(config: str, overrides: list[str]):
    return load_train_config(config, overrides, check_paths=False)


def test_env_enable_offload_sets_both_splits_and_the_split_keys_one() -> None:
    tc = _load("metaworld_ppo_tiny_cpu", [])
    assert not tc.train_run.enable_offload and not tc.eval_run.enable_offload  # off unless asked
    tc = _load("metaworld_ppo_tiny_cpu", ["env.enable_offload=true"])
    assert tc.train_run.enable_offload and tc.eval_run.enable_offload
    tc = _load("metaworld_ppo_tiny_cpu", ["env.eval.enable_offload=true"])
    assert not tc.train_run.enable_offload and tc.eval_run.enable_offload
    # the simulators that can be offloaded here: RoboTwin, LIBERO, ManiSkill's CPU backend
    assert _load(
        "robotwin_place_empty_cup_grpo_openvlaoft", ["env.enable_offload=true"]
    ).train_run.enable_offload
    assert _load("libero_10_grpo_openvlaoft", ["env.enable_offload=true"]).eval_run.enable_offload
    cpu = ["env.enable_offload=true", "env.train.extra.sim_backend=cpu", "env.eval.extra.sim_backend=cpu"]
    assert _load("maniskill_ppo_openvlaoft", cpu).train_run.enable_offload


def test_maniskill_gpu_backend_is_refused_by_name_with_what_is_allowed() -> None:
    with pytest.raises(ConfigError) as err:
        _load("maniskill_ppo_openvlaoft", ["env.enable_offload=true", "env.eval.extra.sim_backend=cpu"])
    assert err.value.errors == [
        "env.train.enable_offload=True is not supported with env_type='maniskill': "
        "env.train.extra['sim_backend']='gpu' cannot be offloaded (ManiSkill's GPU simulation runs in the env "
        "worker's own process, where its GPU memory cannot be released and rebuilt); offload works with "
        "sim_backend='cpu' (simulators in subprocess workers)"
    ]


@pytest.mark.parametrize(
    "overrides, line",
    [
        (
            ["env.enable_offload=sometimes"],
            "env.enable_offload='sometimes' is invalid: expected true or false",
        ),
        (
            ["env.enable_offload=true", "env.train.enable_offload=false"],
            "env.enable_offload=true conflicts with env.train.enable_offload=false: they are one setting",
        ),
    ],
)
def test_bad_values_stop_with_one_line(overrides: list[str], line: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load("metaworld_ppo_tiny_cpu", overrides)
    assert len(err.value.errors) == 1 and err.value.errors[0].startswith(line), err.value.errors
