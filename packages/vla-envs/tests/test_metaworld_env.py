"""Real MetaWorld with rendering, in-process mode (`envs_per_worker=0`): the observation/step contract."""

from __future__ import annotations

import numpy as np
import pytest

from vla_envs import EnvConfig, make_env  # first: sets MUJOCO_GL before metaworld imports mujoco

pytest.importorskip("metaworld")

TASK = "drawer-close-v3"
pytestmark = pytest.mark.filterwarnings("ignore:Constant\\(s\\) may be too high:UserWarning")


def _env(**changes):
    base = {
        "env_type": "metaworld",
        "task": TASK,
        "num_envs": 2,
        "envs_per_worker": 0,
        "image_size": 64,
        "action_repeat": 4,
    }
    return make_env(EnvConfig(**{**base, **changes}))


def _expert_actions(states: np.ndarray, task: str = TASK) -> np.ndarray:
    from metaworld.policies import ENV_POLICY_MAP

    policy = ENV_POLICY_MAP[task]()
    return np.stack([np.clip(policy.get_action(s.astype(np.float64)), -1, 1) for s in states]).astype(
        np.float32
    )


def test_observation_shapes_dtypes_and_upright_images() -> None:
    import mujoco

    env = _env(wrist_camera="gripperPOV", image_size=(48, 64))
    try:
        obs = env.reset(seed=0)
        assert obs["images"].shape == (2, 48, 64, 3) and obs["images"].dtype == np.uint8
        assert obs["wrist_images"].shape == (2, 1, 48, 64, 3) and obs["wrist_images"].dtype == np.uint8
        assert obs["states"].shape == (2, 39) and obs["states"].dtype == np.float32
        assert obs["task_descriptions"] == ["push the drawer closed"] * 2
        assert env.action_dim == 4 and env.autoreset_mode == "same_step"
        assert obs["images"].std() > 10  # a real scene, not a blank buffer
        assert not np.array_equal(obs["wrist_images"][0, 0], obs["images"][0])  # another camera
        # The raw MuJoCo render of the same state through the corner2 camera is upside down: ours is its
        # 180 degree rotation.
        task_env = env.workers[0].runner.sims[0]._current
        renderer = mujoco.Renderer(task_env.env.model, 48, 64)
        renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
        renderer.update_scene(task_env.env.data, camera="corner2")
        raw = renderer.render()
        renderer.close()
        np.testing.assert_array_equal(obs["images"][0], raw[::-1, ::-1])
        assert not np.array_equal(obs["images"][0], raw)
    finally:
        env.close()


def test_success_terminates_with_final_obs_metrics_and_same_step_autoreset() -> None:
    env = _env(max_episode_steps=50)
    try:
        obs = env.reset(seed=1)
        ended_at = None
        for t in range(50):
            res = env.step(_expert_actions(obs["states"]))
            assert res.rewards.shape == res.terminated.shape == res.truncated.shape == (2, 1)
            if res.final_mask.any():
                ended_at = t
                break
            obs = res.obs
        assert ended_at is not None, "the scripted expert should close the drawer within 50 decisions"
        row = int(np.argmax(res.final_mask))
        assert res.terminated[row, 0] and not res.truncated[row, 0]
        assert res.rewards[row, 0] == 1.0  # sparse success reward
        m = res.episode_metrics
        assert m["success_once"][row] == 1.0 and m["episode_len"][row] == ended_at + 1
        assert m["return"][row] == 1.0 and m["reward"][row] == pytest.approx(1.0 / (ended_at + 1))
        # auto_reset: obs is already the next episode's first obs, final_obs is the ended episode's last one
        assert not np.array_equal(res.obs["states"][row], res.final_obs["states"][row])
        assert np.abs(res.obs["states"][row, :3] - res.final_obs["states"][row, :3]).max() > 1e-3
    finally:
        env.close()


def test_truncation_chunk_semantics_and_no_autoreset_hold() -> None:
    env = _env(task="reach-v3", max_episode_steps=3, auto_reset=False, reward_mode="dense")
    try:
        env.reset(seed=0)
        res = env.chunk_step(np.zeros((2, 5, 4), np.float32))
        assert res.truncated[:, 2].all() and not res.terminated.any()
        assert not res.truncated[:, [0, 1, 3, 4]].any()
        assert (res.rewards[:, :3] > 0).all()  # dense shaped reward
        assert (res.rewards[:, 3:] == 0).all()  # rest of the chunk after the end is ignored
        assert res.final_mask.all() and (res.episode_metrics["episode_len"] == 3).all()
        np.testing.assert_array_equal(res.obs["states"], res.final_obs["states"])  # no auto reset
        res2 = env.step(np.zeros((2, 4), np.float32))
        assert not res2.final_mask.any() and (res2.rewards == 0).all()  # held until reset()
        np.testing.assert_array_equal(res2.obs["states"], res.obs["states"])
    finally:
        env.close()


def test_same_reset_state_ids_give_identical_starts_and_groups() -> None:
    env = _env(num_envs=4, use_fixed_reset_state_ids=True, group_size=2)
    try:
        obs = env.reset(reset_state_ids=[7, 7, 8, 7])
        np.testing.assert_array_equal(obs["states"][0], obs["states"][1])
        np.testing.assert_array_equal(obs["images"][0], obs["images"][3])
        assert not np.array_equal(obs["states"][0], obs["states"][2])  # another goal variation
        again = env.reset(reset_state_ids=[8, 8, 8, 8])
        np.testing.assert_array_equal(again["states"][0], obs["states"][2])
        np.testing.assert_array_equal(again["images"][1], obs["images"][2])
        grouped = env.reset(seed=3)
        np.testing.assert_array_equal(grouped["states"][0], grouped["states"][1])
        np.testing.assert_array_equal(grouped["states"][2], grouped["states"][3])
        assert env.describe_reset_state(7) == (TASK, 7)
        with pytest.raises(ValueError, match=r"reset_state_ids must lie in \[0, num_reset_states=50\)"):
            env.reset(reset_state_ids=[0, 1, 2, 50])
    finally:
        env.close()


def test_same_start_groups_take_the_tasks_in_turn() -> None:
    """With several tasks a same-start group is one task and the groups go round the tasks (with two tasks and
    groups of 2, repeating each group's first row's task would give every group task 0)."""
    from vla_envs.metaworld import TASK_DESCRIPTIONS

    tasks = ["reach-v3", "drawer-close-v3"]
    cfg = EnvConfig(
        env_type="metaworld", task_set=tasks, num_envs=4, use_fixed_reset_state_ids=True, group_size=2
    )
    assert cfg.row_tasks(2).tolist() == [0, 0, 1, 1]
    assert cfg.replace(first_row=2).row_tasks(2).tolist() == [1, 1, 0, 0]  # the groups of a larger batch
    assert cfg.replace(use_fixed_reset_state_ids=False).row_tasks(2).tolist() == [0, 1, 0, 1]
    env = _env(task=None, task_set=tasks, num_envs=4, use_fixed_reset_state_ids=True, group_size=2)
    try:
        for seed in (0, 1):
            obs = env.reset(seed=seed)
            said = [TASK_DESCRIPTIONS[tasks[0]]] * 2 + [TASK_DESCRIPTIONS[tasks[1]]] * 2
            assert list(obs["task_descriptions"]) == said  # group 0 runs reach, group 1 drawer-close
            np.testing.assert_array_equal(obs["states"][0], obs["states"][1])
            np.testing.assert_array_equal(obs["images"][2], obs["images"][3])
    finally:
        env.close()


def test_bad_input_errors() -> None:
    with pytest.raises(ValueError, match="valid tasks"):
        _env(task="drawer-shut-v3")
    with pytest.raises(
        ValueError, match=r"EnvConfig.camera='front' is not a MetaWorld camera; valid cameras"
    ):
        _env(camera="front")
    env = _env(action_out_of_range="error")
    try:
        env.reset(seed=0)
        with pytest.raises(ValueError, match="shape"):
            env.step(np.zeros((2, 7), np.float32))
        with pytest.raises(ValueError, match="outside the action range"):
            env.step(np.full((2, 4), 2.0, np.float32))
        with pytest.raises(ValueError, match="NaN"):
            env.step(np.full((2, 4), np.nan, np.float32))
    finally:
        env.close()


def test_task_set_rows_and_hidden_goal() -> None:
    env = _env(task=None, task_set="ML45-test", num_envs=5, render=False)
    try:
        obs = env.reset(seed=0)
        assert env.num_tasks == 5 and env.num_reset_states == 250
        assert obs["task_descriptions"][0] == "pick up the puck from one bin and place it into the other bin"
        assert len(set(obs["task_descriptions"])) == 5
        assert np.all(obs["states"][:, -3:] == 0)  # ML sets hide the goal
        obs = env.reset(reset_state_ids=[50, 50, 50, 50, 50])  # every row switches to task 1
        assert obs["task_descriptions"] == ["pick up the lid and place it on top of the box"] * 5
    finally:
        env.close()


def test_hand_goal_states_carry_the_goal_of_each_task() -> None:
    full = _env(task=None, task_set="MT10", num_envs=10, render=False)
    small = _env(task=None, task_set="MT10", num_envs=10, render=False, extra={"states": "hand_goal"})
    try:
        ids = [task * full.num_reset_states // 10 + 7 for task in range(10)]
        raw, obs = full.reset(reset_state_ids=ids), small.reset(reset_state_ids=ids)
        assert obs["states"].shape == (10, 7) and raw["states"].shape == (10, 39)
        np.testing.assert_array_equal(obs["states"][:, :4], raw["states"][:, :4])  # hand xyz, gripper
        np.testing.assert_array_equal(obs["states"][:, 4:], raw["states"][:, 36:])  # goal xyz
        goals = obs["states"][:, 4:]
        assert np.all(np.abs(goals).sum(axis=1) > 0) and len(np.unique(goals, axis=0)) == 10
        # reach: steering the hand by the goal in its states succeeds
        reach = obs["task_descriptions"].index("reach the goal position")
        state, done = obs["states"][reach], False
        for _ in range(50):
            action = np.zeros((10, 4), np.float32)
            action[reach, :3] = np.clip((state[4:] - state[:3]) * 20, -1, 1)
            res = small.step(action)
            done = bool(res.terminated[reach, 0])
            if done:
                break
            state = res.obs["states"][reach]
        assert done and res.rewards[reach, 0] == 1.0
    finally:
        full.close()
        small.close()
    with pytest.raises(ValueError, match=r"extra\['states'\]='hand_goal' needs a goal-observable task set"):
        _env(task=None, task_set="ML45-test", num_envs=5, render=False, extra={"states": "hand_goal"})
    with pytest.raises(ValueError, match=r"extra\['states'\]='goal' is invalid .*\['full', 'hand_goal'\]"):
        _env(extra={"states": "goal"})


def test_progress_reward_is_the_change_of_the_simulators_shaped_reward() -> None:
    # Oracle: with action_repeat 1, reward_mode 'dense' returns MetaWorld's shaped reward of each new state, so
    # the progress term of decision t must equal coef * (dense[t] - dense[t-1]) / 10, on the same trajectory.
    coef = 0.5
    common = {"task": "drawer-open-v3", "action_repeat": 1, "max_episode_steps": 200, "auto_reset": False}
    dense = _env(render=False, reward_mode="dense", **common)
    progress = _env(render=False, extra={"progress_reward": coef}, **common)
    try:
        ids = [3, 11]
        obs_d, obs_p = dense.reset(reset_state_ids=ids), progress.reset(reset_state_ids=ids)
        np.testing.assert_array_equal(obs_d["states"], obs_p["states"])
        shaped, total, ended = [], np.zeros(2), np.zeros(2, bool)
        for _ in range(200):
            actions = _expert_actions(obs_d["states"], "drawer-open-v3")
            res_d, res_p = dense.step(actions), progress.step(actions)
            # the start state's evaluation does not disturb the simulation: the same states step by step
            np.testing.assert_array_equal(res_d.obs["states"], res_p.obs["states"])
            live = ~ended
            shaped.append(np.where(live, res_d.rewards[:, 0], np.nan))
            total += np.where(live, res_p.rewards[:, 0], 0.0)
            if len(shaped) > 1:
                success = res_p.terminated[:, 0].astype(np.float64)
                expected = success + coef * (shaped[-1] - shaped[-2]) / 10.0
                np.testing.assert_allclose(
                    res_p.rewards[live, 0], expected[live], rtol=1e-6, atol=1e-6
                )  # float32
            ended |= res_p.terminated[:, 0]
            if ended.all():
                break
            obs_d = res_d.obs
        assert ended.all(), "the scripted expert opens the drawer"
        # an episode's progress terms telescope: success + coef * (last progress - first progress)
        last = np.array([s[~np.isnan(s)][-1] for s in np.stack(shaped, axis=1)])
        start_progress = last / 10.0 - (total - 1.0) / coef
        assert np.all((start_progress >= 0) & (start_progress < 0.3)) and np.all(total > 1.0 + coef * 0.5)
    finally:
        dense.close()
        progress.close()
    with pytest.raises(ValueError, match=r"extra\['progress_reward'\]=-1 is invalid .*a number >= 0"):
        _env(extra={"progress_reward": -1})
    with pytest.raises(ValueError, match=r"extra\['progress_reward'\]=True is invalid"):
        _env(extra={"progress_reward": True})
    with pytest.raises(ValueError, match=r"extra\['progress_reward'\]=0.5 is invalid .*reward_mode='dense'"):
        _env(reward_mode="dense", extra={"progress_reward": 0.5})


def test_coarser_drawn_meshes_keep_the_physics_and_nearly_the_images() -> None:
    """extra['render_mesh_grid']: fewer triangles drawn, the same simulation bit for bit (the scripted expert's
    episode, gripper contacts included) and images that differ by less than one grey level on average."""
    from vla_envs.metaworld.meshes import cluster_faces

    full = _env(extra={"hide_far_meshes": True}, max_episode_steps=50)
    coarse = _env(extra={"hide_far_meshes": True, "render_mesh_grid": 0.005}, max_episode_steps=50)
    try:
        models = [env.workers[0].runner.sims[0]._task_env(TASK).env.model for env in (full, coarse)]
        drawn = [int(m.mesh_facenum.sum()) for m in models]
        assert drawn[1] < 0.5 * drawn[0]
        np.testing.assert_array_equal(
            models[0].mesh_vert, models[1].mesh_vert
        )  # hulls and inertia as compiled
        obs_f, obs_c = full.reset(seed=3), coarse.reset(seed=3)
        diffs, ended = [], np.zeros(2, dtype=bool)
        for _ in range(50):
            np.testing.assert_array_equal(obs_f["states"], obs_c["states"])
            diffs.append(np.abs(obs_f["images"].astype(np.int16) - obs_c["images"]).mean())
            actions = _expert_actions(obs_f["states"])
            res_f, res_c = full.step(actions), coarse.step(actions)
            np.testing.assert_array_equal(res_f.rewards, res_c.rewards)
            ended |= res_f.final_mask
            if ended.all():
                break
            obs_f, obs_c = res_f.obs, res_c.obs
        assert ended.all(), "the scripted expert closes the drawer"
        assert 0 < np.mean(diffs) < 1.0
    finally:
        full.close()
        coarse.close()
    # the clustering itself: a quad split into 2 triangles survives a fine grid, collapses on a coarse one
    verts = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], dtype=np.float64)
    quad = np.array([[0, 1, 2], [0, 2, 3]])
    np.testing.assert_array_equal(cluster_faces(verts, quad, 0.5), quad)
    assert cluster_faces(verts, quad, 10.0).shape == (0, 3)
    # a vertex no face uses (index 4, at its cell's mean) never represents the cell: it has no normal
    verts = np.array([[0, 0, 0], [0.2, 0, 0], [1, 0, 0], [0, 1, 0], [0.1, 0, 0]], dtype=np.float64)
    merged = cluster_faces(verts, np.array([[0, 2, 3], [1, 2, 3]]), 0.5)
    assert len(merged) == 1 and merged[0, 0] in (0, 1) and list(merged[0, 1:]) == [2, 3]
    with pytest.raises(ValueError, match=r"extra\['render_mesh_grid'\]=0.5 is invalid .*0 <= x <= 0.05"):
        _env(extra={"render_mesh_grid": 0.5})
