"""ManiSkill3 adapter on the real simulator (CPU backend, software Vulkan through lavapipe).

Env creation is costly on llvmpipe (RGB ~10-30 s), so the envs are module-scoped fixtures: one state-only
env with subprocess workers and one RGB env (main + hand camera). Everything skips with the reason when
mani-skill is missing or no Vulkan device is found.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("mani_skill", reason="mani-skill not installed (pip install 'vla-envs[maniskill]')")

from vla_envs import EnvConfig, make_env
from vla_envs.maniskill import (
    TASKS,
    ManiSkillAssetsMissingError,
    list_maniskill_tasks,
    maniskill_unavailable_reason,
)
from vla_envs.maniskill.cpu_sim import ManiSkillSim
from vla_envs.maniskill.gpu_env import ManiSkillGPUEnv
from vla_envs.maniskill.options import resolve_options


@pytest.fixture(scope="module")
def vulkan() -> None:
    reason = maniskill_unavailable_reason()
    if reason is not None:
        pytest.skip(f"ManiSkill cannot create envs here: {reason}")


@pytest.fixture(scope="module")
def state_env(vulkan: None):
    cfg = EnvConfig(
        env_type="maniskill",
        task="PickCube-v1",
        num_envs=2,
        envs_per_worker=1,
        render=False,
        max_episode_steps=6,
    )
    env = make_env(cfg)
    yield env
    env.close()


@pytest.fixture(scope="module")
def rgb_env(vulkan: None):
    cfg = EnvConfig(
        env_type="maniskill",
        task="PickCube-v1",
        num_envs=1,
        envs_per_worker=1,
        image_size=(96, 128),
        wrist_camera="hand_camera",
        max_episode_steps=3,
        worker_timeout_s=600,
    )
    env = make_env(cfg)
    yield env
    env.close()


# ---------------------------------------------------------------------------------------------- no simulator
@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"extra": {"sim_backend": "tpu"}}, r"extra\['sim_backend'\]='tpu'.*'cpu', 'gpu'"),
        ({"extra": {"control_mode": "pd_joint_pos"}}, r"extra\['control_mode'\]='pd_joint_pos'"),
        ({"extra": {"states": "full"}}, r"extra\['states'\]='full'.*proprio"),
        ({"extra": {"bogus": 1}}, r"unknown keys \['bogus'\]"),
        ({"wrist_camera": "left"}, r"wrist_camera='left'.*hand_camera"),
        ({"task": "NoSuchTask-v9"}, r"'NoSuchTask-v9' is not a registered ManiSkill env.*PickCube-v1"),
    ],
)
def test_bad_settings_fail_fast_naming_the_key(changes: dict, match: str) -> None:
    cfg = EnvConfig(env_type="maniskill", task="PickCube-v1").replace(**changes)
    with pytest.raises(ValueError, match=match):
        make_env(cfg)


@pytest.mark.timeout(60)
def test_task_needing_downloads_errors_with_instructions_instead_of_prompting() -> None:
    with pytest.raises(ManiSkillAssetsMissingError) as info:
        make_env(EnvConfig(env_type="maniskill", task="PickSingleYCB-v1"))
    msg = str(info.value)
    assert (
        "['ycb']" in msg and "python -m mani_skill.utils.download_asset ycb" in msg and "MS_ASSET_DIR" in msg
    )
    with pytest.raises(ManiSkillAssetsMissingError, match="bridge_v2_real2sim"):
        make_env(EnvConfig(env_type="maniskill", task="PutCarrotOnPlateInScene-v1"))
    with pytest.raises(ManiSkillAssetsMissingError, match="RLinf"):
        make_env(EnvConfig(env_type="maniskill", task="PutOnPlateInScene25Main-v3"))


_NO_VULKAN_SCRIPT = """
from vla_envs import EnvConfig, make_env
from vla_envs.maniskill import ManiSkillUnavailableError, maniskill_unavailable_reason
if __name__ == "__main__":
    print("REASON:", maniskill_unavailable_reason())
    try:
        make_env(EnvConfig(env_type="maniskill", task="PickCube-v1", render=False))
    except ManiSkillUnavailableError as exc:
        print("RAISED:", str(exc).splitlines()[0])
        print("LINES:", len(str(exc).splitlines()))
"""


@pytest.mark.slow
def test_missing_vulkan_driver_gives_a_skip_reason_and_a_clear_error(tmp_path) -> None:
    """With no Vulkan ICD (as on a machine without lavapipe) nothing crashes: tests get a reason to skip."""
    script = tmp_path / "no_vulkan.py"
    script.write_text(_NO_VULKAN_SCRIPT)
    env = {**os.environ, "VK_ICD_FILENAMES": str(tmp_path / "missing_icd.json")}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (
        "REASON: ManiSkill (SAPIEN) found no usable Vulkan device to create env 'PickCube-v1'" in out.stdout
    )
    assert "lavapipe" in out.stdout and "`bash scripts/install_system_deps.sh`" in out.stdout
    # the worker process finds no driver before it builds its simulators and passes its one-line error on
    assert "RAISED: ManiSkill (SAPIEN) needs a Vulkan device and no Vulkan driver" in out.stdout
    assert "LINES: 1" in out.stdout


def test_every_listed_task_has_an_instruction() -> None:
    """Listed tasks carry our instruction, except the PutOnPlateInScene25 family, whose task code has its own."""
    from vla_envs.maniskill.put_on_plate import PUT_ON_PLATE_TASKS

    tasks = list_maniskill_tasks()
    assert {"PickCube-v1", "PushCube-v1", "StackCube-v1", "PegInsertionSide-v1"} <= set(tasks)
    assert set(tasks) - set(TASKS) == set(PUT_ON_PLATE_TASKS)
    assert all(len(TASKS[t].instruction.split()) >= 4 for t in tasks if t in TASKS)


# ---------------------------------------------------------------------------------------------- state env
def test_state_obs_shapes_dtypes_and_descriptions(state_env) -> None:
    obs = state_env.reset(seed=0)
    assert state_env.action_dim == 7 and state_env.autoreset_mode == "same_step"
    np.testing.assert_array_equal(state_env.action_low, -np.ones(7, np.float32))
    assert obs["images"].shape == (2, 0, 0, 3) and obs["images"].dtype == np.uint8
    assert obs["wrist_images"] is None
    assert obs["states"].shape == (2, 16) and obs["states"].dtype == np.float32
    # tcp quaternion is unit-norm; the 2 finger joints start open (~0.04 m)
    np.testing.assert_allclose(np.linalg.norm(obs["states"][:, 3:7], axis=1), 1.0, atol=1e-4)
    np.testing.assert_allclose(obs["states"][:, 14:16], 0.04, atol=1e-3)
    assert obs["task_descriptions"] == [TASKS["PickCube-v1"].instruction] * 2


def test_same_reset_state_id_gives_same_start_and_ids_are_reproducible(state_env) -> None:
    same = state_env.reset(reset_state_ids=[7, 7])["states"]
    np.testing.assert_array_equal(same[0], same[1])
    other = state_env.reset(reset_state_ids=[7, 8])["states"]
    assert not np.allclose(other[0], other[1])  # the start qpos noise depends on the seed
    again = state_env.reset(reset_state_ids=[8, 7])["states"]
    np.testing.assert_array_equal(again[1], same[0])
    np.testing.assert_array_equal(again[0], other[1])


def test_truncation_final_obs_and_same_step_autoreset(state_env) -> None:
    state_env.reset(reset_state_ids=[3, 4])
    up = np.zeros((2, 4, 7), np.float32)
    up[:, :, 2] = 1.0  # move the hand up: never a success, so the episode is truncated at 6 steps
    first = state_env.chunk_step(up)
    assert not first.final_mask.any() and not first.truncated.any() and not first.terminated.any()
    second = state_env.chunk_step(up)
    assert second.final_mask.all()
    np.testing.assert_array_equal(second.truncated, [[False, True, False, False]] * 2)
    assert not second.terminated.any()
    np.testing.assert_array_equal(second.rewards[:, 2:], 0.0)  # the rest of the chunk is ignored
    np.testing.assert_array_equal(second.episode_metrics["episode_len"], [6.0, 6.0])
    np.testing.assert_array_equal(second.episode_metrics["success_once"], [0.0, 0.0])
    # final obs: the hand went up by ~6 x 0.1 m (clipped by the controller); the new episode starts low again
    assert (second.final_obs["states"][:, 2] > first.obs["states"][:, 2]).all()
    assert (second.obs["states"][:, 2] < second.final_obs["states"][:, 2] - 0.05).all()


def test_reward_modes_and_action_repeat_in_process(vulkan: None) -> None:
    rewards = {}
    for mode in ("sparse", "dense", "normalized_dense"):
        cfg = EnvConfig(
            env_type="maniskill",
            task="PickCube-v1",
            render=False,
            action_repeat=2,
            extra={"reward_mode": mode},
        )
        sim = ManiSkillSim(cfg, resolve_options(cfg))
        try:
            sim.reset(0)
            _, reward, success, failed = sim.step(np.zeros(7, np.float32))
            assert sim.base.elapsed_steps.item() == 2  # action_repeat simulator steps per decision
        finally:
            sim.close()
        rewards[mode] = reward
        assert not success and not failed
    assert rewards["sparse"] == 0.0
    assert rewards["dense"] > 0.0  # reaching reward: 1 - tanh(5 * distance) summed over 2 steps
    assert 0.0 < rewards["normalized_dense"] <= 2.0 and rewards["normalized_dense"] < rewards["dense"]


def test_batched_backend_logic_runs_on_a_one_env_cpu_sim(vulkan: None) -> None:
    """The GPU backend's chunk/autoreset/hold logic is device-agnostic: run it on the CPU simulator (B = 1)."""
    import torch

    cfg = EnvConfig(
        env_type="maniskill", task="PickCube-v1", render=False, max_episode_steps=6, auto_reset=False
    )
    env = ManiSkillGPUEnv(cfg, resolve_options(cfg))
    try:
        start = env.reset(reset_state_ids=[7])["states"].clone()
        assert not torch.equal(env.reset(reset_state_ids=[8])["states"], start)
        assert torch.equal(env.reset(reset_state_ids=[7])["states"], start)
        up = np.zeros((1, 4, 7), np.float32)
        up[:, :, 2] = 1.0
        assert not env.chunk_step(up).final_mask.any()
        res = env.chunk_step(up)
        assert res.final_mask.tolist() == [True]
        assert res.truncated.tolist() == [[False, True, False, False]] and not res.terminated.any()
        assert res.episode_metrics["episode_len"].tolist() == [6.0]
        assert torch.equal(res.obs["states"], res.final_obs["states"])  # auto_reset=False: the row is held
        held = env.chunk_step(up)  # a held row ignores actions until reset()
        assert not held.final_mask.any() and not held.rewards.any() and not held.truncated.any()
        assert torch.equal(held.obs["states"], res.final_obs["states"])
        assert torch.equal(env.reset(reset_state_ids=[7])["states"], start)
    finally:
        env.close()


# ---------------------------------------------------------------------------------------------- RGB env
@pytest.mark.slow
def test_rgb_obs_upright_images_wrist_camera_and_same_start(rgb_env) -> None:
    obs = rgb_env.reset(reset_state_ids=[1])
    assert obs["images"].shape == (1, 96, 128, 3) and obs["images"].dtype == np.uint8
    assert obs["wrist_images"].shape == (1, 1, 96, 128, 3) and obs["wrist_images"].dtype == np.uint8
    assert obs["states"].shape == (1, 16)
    image = obs["images"][0].astype(np.float32)
    red_minus_blue = image[..., 0] - image[..., 2]
    # Upright: the wooden table (strongly red-orange) fills the bottom half; the top is grey background/robot.
    assert red_minus_blue[48:].mean() > 60.0 > red_minus_blue[:24].mean()
    # the hand camera looks down at the table: mostly wood, and not the same picture as the main camera
    assert (
        obs["wrist_images"][0, 0, ..., 0].astype(np.float32) - obs["wrist_images"][0, 0, ..., 2]
    ).mean() > 60.0
    other = rgb_env.reset(reset_state_ids=[2])
    assert not np.array_equal(other["images"], obs["images"])  # the cube moved
    again = rgb_env.reset(reset_state_ids=[1])
    np.testing.assert_array_equal(again["images"], obs["images"])
    np.testing.assert_array_equal(again["wrist_images"], obs["wrist_images"])


@pytest.mark.slow
def test_rgb_final_obs_is_the_last_frame_and_obs_is_the_next_start(rgb_env) -> None:
    rgb_env.reset(reset_state_ids=[1])
    start = rgb_env.reset(reset_state_ids=[1])["images"]
    down = np.zeros((1, 4, 7), np.float32)
    down[:, :, 0] = 1.0  # push the hand forward, out of the start view
    res = rgb_env.chunk_step(down)
    np.testing.assert_array_equal(res.truncated, [[False, False, True, False]])
    assert res.final_mask.tolist() == [True]
    assert res.final_obs["images"].shape == (1, 96, 128, 3)
    assert np.abs(res.final_obs["images"].astype(int) - start.astype(int)).mean() > 1.0  # the arm moved
    assert res.final_obs["wrist_images"].shape == (1, 1, 96, 128, 3)


def test_batched_backend_same_step_autoreset_on_a_one_env_cpu_sim(vulkan: None) -> None:
    """The GPU backend's auto-reset path (partial reset + obs merge), on the CPU simulator (B = 1)."""
    import torch

    cfg = EnvConfig(env_type="maniskill", task="PickCube-v1", render=False, max_episode_steps=6)
    env = ManiSkillGPUEnv(cfg, resolve_options(cfg))
    try:
        env.reset(reset_state_ids=[7])
        up = np.zeros((1, 4, 7), np.float32)
        up[:, :, 2] = 1.0  # hand up: never a success, truncated after 6 decisions
        env.chunk_step(up)
        res = env.chunk_step(up)
        assert res.final_mask.tolist() == [True]
        assert res.truncated.tolist() == [[False, True, False, False]] and not res.terminated.any()
        assert res.episode_metrics["episode_len"].tolist() == [6.0]
        # same step: obs is already the next episode's start (hand low again), final_obs the raised hand
        assert float(res.obs["states"][0, 2]) < float(res.final_obs["states"][0, 2]) - 0.05
        # the new episode's step counter starts at 0: 4 steps here, truncation at its 6th step
        nxt = env.chunk_step(up)
        assert not nxt.final_mask.any() and not nxt.truncated.any()
        last = env.chunk_step(up)
        assert last.truncated.tolist() == [[False, True, False, False]]
        assert last.episode_metrics["episode_len"].tolist() == [6.0]
        assert torch.equal(last.rewards[:, 2:], torch.zeros(1, 2))  # the rest of the chunk is ignored
    finally:
        env.close()


def test_the_batched_backend_records_episode_videos(vulkan: None, tmp_path) -> None:
    """`video_cfg.save_video` with the batched (GPU) backend's env class: one mp4 per finished episode of the
    recorded rows, a frame per step after the reset frame. Run here on ManiSkill's CPU simulator with one env (the
    class drives any batched ManiSkill env; the CPU simulator holds one)."""
    import imageio.v2 as imageio

    from vla_envs.config import VideoConfig

    cfg = EnvConfig(
        env_type="maniskill", task="PickCube-v1", num_envs=1, max_episode_steps=4, image_size=64,
        video=VideoConfig(save_video=True, video_base_dir=str(tmp_path), fps=10),
    )  # fmt: skip
    env = ManiSkillGPUEnv(cfg, resolve_options(cfg))
    try:
        env.reset()
        env.set_video_tag("eval_iter3")
        zeros = np.zeros((1, 3, env.action_dim), np.float32)
        first = env.chunk_step(zeros)
        assert not first.final_mask.any() and list(tmp_path.iterdir()) == []
        second = env.chunk_step(zeros)  # steps 4-6: the episode is cut at step 4, then reset
        assert second.final_mask.all()
    finally:
        env.close()
    (video,) = sorted(tmp_path.glob("*.mp4"))
    assert video.name == "eval_iter3_env0_ep0.mp4"
    assert len(imageio.mimread(str(video))) == 1 + 4  # the reset frame and one per step of the episode
