"""Config validation, registry, action checks and reset-id enumeration (no simulator needed)."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from vla_envs import (
    EnvAdapter,
    EnvConfig,
    VideoConfig,
    check_actions,
    list_env_types,
    list_tasks,
    make_env,
    register_adapter,
)


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"num_envs": 0}, "num_envs"),
        ({"reward_mode": "shaped"}, "reward_mode"),
        ({"action_repeat": 0}, "action_repeat"),
        ({"num_envs": 4, "group_size": 3}, "group_size"),
        ({"action_out_of_range": "wrap"}, "action_out_of_range"),
        ({"start_method": "thread"}, "start_method"),
        ({"task": "reach-v3", "task_set": "MT10"}, "task"),
        ({"max_episode_steps": 0}, "max_episode_steps"),
        ({"worker_timeout_s": float("nan")}, "worker_timeout_s"),
        ({"worker_start_timeout_s": float("inf")}, "worker_start_timeout_s"),
        ({"action_tolerance": float("nan")}, "action_tolerance"),
    ],
)
def test_config_rejects_bad_values_naming_the_key(changes: dict, key: str) -> None:
    with pytest.raises(ValueError, match=f"EnvConfig.{key}="):
        base = (
            {"env_type": "metaworld"} if "task" in changes else {"env_type": "metaworld", "task": "reach-v3"}
        )
        EnvConfig(**base, **changes)


def test_config_from_dict_accepts_video_cfg_alias_and_rejects_unknown_keys() -> None:
    cfg = EnvConfig.from_dict(
        {
            "env_type": "metaworld",
            "task": "reach-v3",
            "video_cfg": {"save_video": True, "video_base_dir": "/tmp/v"},
        }
    )
    assert (
        isinstance(cfg.video, VideoConfig) and cfg.video.save_video and cfg.video.video_base_dir == "/tmp/v"
    )
    with pytest.raises(ValueError, match="unknown keys \\['max_steps'\\]"):
        EnvConfig.from_dict({"env_type": "metaworld", "task": "reach-v3", "max_steps": 3})
    assert EnvConfig(env_type="metaworld", num_envs=5, envs_per_worker=2).num_workers == 3
    assert EnvConfig(env_type="metaworld", num_envs=5, envs_per_worker=0).num_workers == 0
    assert EnvConfig(env_type="metaworld", image_size=(48, 64)).image_hw == (48, 64)


def test_env_type_is_required_and_must_be_registered() -> None:
    known = ", ".join(list_env_types())  # every registered type, those other tests register included
    assert {"libero", "maniskill", "metaworld", "robotwin"} <= set(list_env_types())
    with pytest.raises(ValueError, match=re.escape(f"EnvConfig.env_type is required: one of: {known}")):
        EnvConfig(task="reach-v3")
    with pytest.raises(ValueError, match=r"EnvConfig\.env_type is required"):
        make_env({"task": "reach-v3"})
    with pytest.raises(
        ValueError, match=re.escape(f"EnvConfig.env_type='mujoco_foo' is not one of: {known}") + "$"
    ):
        EnvConfig(env_type="mujoco_foo")
    with pytest.raises(
        ValueError, match=r"env_type='metawrld' is not one of: .* \(did you mean 'metaworld'\?\)"
    ):
        EnvConfig.from_dict({"env_type": "metawrld"})
    assert {"metaworld", "maniskill"} <= set(list_env_types())


def test_adapter_defaults_live_with_the_adapter() -> None:
    from vla_envs.checks import check_env_config
    from vla_envs.libero.options import resolve_options as libero_options
    from vla_envs.metaworld.options import resolve_options as metaworld_options

    # no camera: each adapter's own default; MetaWorld-only settings are MetaWorld's `extra` keys
    assert EnvConfig(env_type="metaworld").camera is None
    assert metaworld_options(EnvConfig(env_type="metaworld")).camera == "corner2"
    assert libero_options(EnvConfig(env_type="libero", task="x")).image_hw == (64, 64)
    opts = metaworld_options(EnvConfig(env_type="metaworld", extra={"hide_far_meshes": True}))
    assert opts.hide_far_meshes and not metaworld_options(EnvConfig(env_type="metaworld")).hide_far_meshes
    with pytest.raises(ValueError, match="unknown keys \\['hide_far_meshes'\\] for env_type='libero'"):
        libero_options(EnvConfig(env_type="libero", task="x", extra={"hide_far_meshes": True}))
    with pytest.raises(ValueError, match="extra\\['hide_far_meshes'\\]='yes' is invalid"):
        check_env_config(EnvConfig(env_type="metaworld", task="reach-v3", extra={"hide_far_meshes": "yes"}))
    with pytest.raises(TypeError, match="hide_far_meshes"):
        EnvConfig(env_type="metaworld", hide_far_meshes=True)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="camera='corner2' is invalid for env_type='libero'"):
        libero_options(EnvConfig(env_type="libero", task="x", camera="corner2"))


def test_register_adapter_and_list_tasks() -> None:
    register_adapter(
        EnvAdapter("dummy_test_env", lambda cfg: cfg.num_envs, lambda: ["a", "b"]), overwrite=True
    )
    assert make_env(EnvConfig(env_type="dummy_test_env", num_envs=3)) == 3
    assert list_tasks("dummy_test_env") == ["a", "b"]
    assert len(list_tasks("metaworld")) == 50


def test_import_does_not_import_a_simulator() -> None:
    code = (
        "import sys, vla_envs; from vla_envs import make_env, list_tasks; list_tasks('metaworld');"
        "bad=[m for m in ('mujoco','metaworld','mani_skill','torch','sapien') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_check_actions_shape_nan_and_range() -> None:
    low, high = -np.ones(4, np.float32), np.ones(4, np.float32)
    kw = {"num_envs": 2, "action_dim": 4, "low": low, "high": high}
    with pytest.raises(ValueError, match=r"shape \[num_envs=2, chunk>=1, action_dim=4\], got \(2, 1, 3\)"):
        check_actions(np.zeros((2, 1, 3)), **kw)
    bad = np.zeros((2, 1, 4))
    bad[1, 0, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        check_actions(bad, **kw)
    far = np.zeros((2, 1, 4))
    far[0, 0, 1] = 1.5
    with pytest.raises(ValueError, match="outside the action range"):
        check_actions(far, out_of_range="error", **kw)
    assert check_actions(far, out_of_range="clip", **kw)[0, 0, 1] == 1.0
    slight = np.full((2, 1, 4), 1.0005)
    out = check_actions(slight, out_of_range="error", tolerance=1e-3, **kw)
    assert out.dtype == np.float32 and out.max() == 1.0
