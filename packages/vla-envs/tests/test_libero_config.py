"""LIBERO adapter without a simulator: config validation, suite tables, rewards, and a prompt-free offline import."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from vla_envs import EnvConfig, list_tasks, make_env
from vla_envs.libero.options import LiberoOptions, resolve_options
from vla_envs.libero.sim import decision_reward, quat2axisangle

pytestmark = pytest.mark.filterwarnings(
    "ignore:The 'warn' method is deprecated:DeprecationWarning"
)  # robosuite


def _cfg(**changes) -> EnvConfig:
    base = {"env_type": "libero", "task_set": "libero_spatial", "num_envs": 1, "envs_per_worker": 0}
    return EnvConfig(**{**base, **changes})


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"task_set": "libero_100"}, "not a LIBERO suite.*libero_130"),
        ({"reward_mode": "dense"}, "reward_mode='dense'.*sparse"),
        ({"camera": "frontview"}, "camera='frontview'.*agentview"),
        ({"wrist_camera": "gripperPOV"}, "wrist_camera='gripperPOV'.*robot0_eye_in_hand"),
        ({"num_trials_per_task": 51}, "num_trials_per_task=51.*50 fixed initial states"),
        ({"extra": {"settle_steps": 3}}, "unknown keys \\['settle_steps'\\]"),
        ({"extra": {"image_flip": "none"}}, "image_flip.*rotate180"),
        ({"extra": {"step_penalty": -0.1}}, "step_penalty.*>= 0"),
        ({"extra": {"num_settle_steps": -1}}, "num_settle_steps.*>= 0"),
    ],
)
def test_bad_config_fails_fast_naming_key_and_allowed_values(changes: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_env(_cfg(**changes))


def test_options_defaults_and_camera_aliases() -> None:
    opts = resolve_options(_cfg(image_size=224, wrist_camera="wrist", extra={"reward_coef": 5.0}))
    assert opts.cameras == ["agentview", "robot0_eye_in_hand"]
    assert opts.image_hw == (224, 224) and opts.num_settle_steps == 10 and opts.reward_coef == 5.0
    assert opts.settle_action == [0, 0, 0, 0, 0, 0, -1]  # no-op with the gripper open
    assert resolve_options(_cfg(render=False)).cameras == []


def test_decision_reward_sparse_penalty_and_relative() -> None:
    plain = LiberoOptions(reward_coef=5.0, step_penalty=0.01)
    assert decision_reward(False, False, plain) == pytest.approx(-0.01)
    assert decision_reward(True, True, plain) == pytest.approx(4.99)
    rel = LiberoOptions(reward_coef=5.0, use_rel_reward=True)
    assert decision_reward(True, False, rel) == 5.0  # success reached
    assert decision_reward(True, True, rel) == 0.0  # success held
    assert decision_reward(False, True, rel) == -5.0  # success lost


def test_quat2axisangle_matches_robosuite() -> None:
    transform_utils = pytest.importorskip("robosuite.utils.transform_utils", exc_type=ImportError)
    rng = np.random.default_rng(0)
    for _ in range(20):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        np.testing.assert_allclose(quat2axisangle(q), transform_utils.quat2axisangle(q.copy()), atol=1e-12)
    np.testing.assert_array_equal(quat2axisangle(np.array([0.0, 0.0, 0.0, 1.0])), np.zeros(3))


def test_suites_have_the_documented_sizes_and_130_unique_tasks() -> None:
    pytest.importorskip("libero.libero", exc_type=ImportError)
    from vla_envs.libero import suite_tasks

    sizes = {"libero_spatial": 10, "libero_object": 10, "libero_goal": 10, "libero_90": 90, "libero_10": 10}
    for suite, size in {**sizes, "libero_130": 130}.items():
        tasks = suite_tasks(suite)
        assert len(tasks) == size, suite
        assert all(t.language and t.language == t.language.strip() for t in tasks)
    names = list_tasks("libero")
    assert len(names) == len(set(names)) == 130
    assert [t.name for t in suite_tasks("libero_130")[:10]] == [t.name for t in suite_tasks("libero_spatial")]
    assert suite_tasks("libero_spatial")[0].language == (
        "pick up the black bowl between the plate and the ramekin and place it on the plate"
    )


def test_import_and_env_construction_need_no_prompt_and_no_network(tmp_path: Path) -> None:
    """A fresh HOME and LIBERO_CONFIG_PATH (first run), stdin closed, sockets refusing to connect."""
    pytest.importorskip("libero.libero", exc_type=ImportError)
    script = textwrap.dedent(
        """
        import builtins, socket
        def refuse(*args, **kwargs):
            raise RuntimeError(f"network access: {args}")
        socket.socket.connect = refuse
        socket.create_connection = refuse
        builtins.input = lambda *a: (_ for _ in ()).throw(RuntimeError("input() prompt"))
        from vla_envs.libero.env import libero_spec
        from vla_envs import EnvConfig
        spec = libero_spec(EnvConfig(env_type="libero", task_set="libero_130", num_envs=1))
        from libero.libero.envs import OffScreenRenderEnv  # imports robosuite and mujoco
        print("OK", len(spec.tasks))
        """
    )
    env = {**os.environ, "HOME": str(tmp_path), "LIBERO_CONFIG_PATH": str(tmp_path / "libero_cfg")}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OK 130" in proc.stdout
    assert not (tmp_path / "libero_cfg").exists()  # nothing written on first import
