"""RoboTwin adapter against `tests/robotwin_stub/`, a TEST DOUBLE of a RoboTwin checkout that follows the behaviour
measured on the real code (home pose for every seed, open grippers at reset, sticky success, array flags, no
observation before reset). These tests check the adapter's own logic quickly: task list, config -> task_config,
checkout/asset errors, image processing, seeds, chunk execution, same-step autoreset, reset ids. The real
RoboTwin code is exercised by test_robotwin_real.py."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vla_envs import EnvConfig, list_tasks, make_env
from vla_envs.robotwin import UNSUPPORTED_TASKS, RoboTwinUnavailableError

pytest.importorskip("yaml")  # RoboTwin's (and the double's) embodiment table is YAML

STUB = Path(__file__).parent / "robotwin_stub"
TASK = "place_empty_cup"


@pytest.fixture()
def assets(tmp_path: Path) -> Path:
    """A fake asset download: the folders RoboTwin's zips unpack to, and two embodiment configs."""
    for d in ("assets/objects", "assets/background_texture"):
        (tmp_path / d).mkdir(parents=True)
    for emb in ("piper", "aloha-agilex"):
        (tmp_path / "assets/embodiments" / emb).mkdir(parents=True)
        (tmp_path / "assets/embodiments" / emb / "config.yml").write_text(
            "arm_joints_name: [[j1, j2, j3, j4, j5, j6], [j1, j2, j3, j4, j5, j6]]\n"
        )
    return tmp_path


@pytest.fixture(autouse=True)
def _isolate_robotwin_modules(monkeypatch: pytest.MonkeyPatch):
    """The adapter imports the checkout's `robotwin` and `envs` packages; keep them out of other tests."""
    for name in ("ROBOTWIN_PATH", "ASSETS_PATH", "ROBOTWIN_ASSETS_ROOT", "ROBOTWIN_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for name in [m for m in sys.modules if m.split(".")[0] in ("robotwin", "envs")]:
        del sys.modules[name]


def _cfg(assets: Path | None, **changes) -> EnvConfig:
    extra = {"robotwin_path": str(STUB)}
    if assets is not None:
        extra["assets_path"] = str(assets)
    extra.update(changes.pop("extra", {}))
    base = {"env_type": "robotwin", "task": TASK, "num_envs": 2, "image_size": 224, "max_episode_steps": 50}
    return EnvConfig(**{**base, **changes, "extra": extra})


def _expected_image(raw: np.ndarray, crop: bool) -> np.ndarray:
    """Independent reference: central 90% of the area (OpenVLA-OFT), then a bilinear resize to 224 x 224; without
    the crop the native frame."""
    if not crop:
        return raw
    if crop:
        h, w = raw.shape[:2]
        ch, cw = round(h * math.sqrt(0.9)), round(w * math.sqrt(0.9))
        raw = raw[(h - ch) // 2 : (h - ch) // 2 + ch, (w - cw) // 2 : (w - cw) // 2 + cw]
    return np.asarray(Image.fromarray(raw).resize((224, 224), Image.Resampling.BILINEAR))


def _grippers(b: int, c: int, value: float) -> np.ndarray:
    """Actions [b, c, 14]: joints at 0, both grippers at `value` (1 = open, as at reset; 0 = closed)."""
    actions = np.zeros((b, c, 14), dtype=np.float32)
    actions[..., 6] = actions[..., 13] = value
    return actions


def test_the_46_supported_tasks_and_clear_errors_for_the_4_unsupported(assets: Path) -> None:
    tasks = list_tasks("robotwin")
    assert len(tasks) == len(set(tasks)) == 46
    assert {"place_empty_cup", "adjust_bottle", "stack_blocks_two", "handover_block"} <= set(tasks)
    assert not set(UNSUPPORTED_TASKS) & set(tasks)
    for task in UNSUPPORTED_TASKS:
        with pytest.raises(ValueError, match=f"{task}.*not supported by RoboTwin's vector env"):
            make_env(_cfg(assets, task=task))
    with pytest.raises(ValueError, match=r"unknown RoboTwin task 'fold_towel'"):
        make_env(_cfg(assets, task="fold_towel"))


def test_missing_checkout_or_assets_say_what_is_missing_and_how_to_install(
    assets: Path, tmp_path: Path
) -> None:
    with pytest.raises(RoboTwinUnavailableError, match=r"needs RoboTwin's assets.*setup_robotwin.sh"):
        make_env(EnvConfig(env_type="robotwin", task=TASK, num_envs=1))
    with pytest.raises(RoboTwinUnavailableError, match=r"not installed in this environment.*ROBOTWIN_PYTHON"):
        make_env(EnvConfig(env_type="robotwin", task=TASK, num_envs=1, extra={"assets_path": str(assets)}))
    with pytest.raises(RoboTwinUnavailableError, match=r"robotwin_python.*'/no/python' is not an executable"):
        make_env(_cfg(assets, extra={"robotwin_python": "/no/python"}))
    with pytest.raises(
        RoboTwinUnavailableError, match=r"not a RoboTwin checkout.*robotwin/envs/vector_env.py"
    ):
        make_env(_cfg(assets, extra={"robotwin_path": str(tmp_path)}))
    with pytest.raises(
        RoboTwinUnavailableError, match=r"missing.*envs/lift_pot.py"
    ):  # a task module not there
        make_env(_cfg(assets, task="lift_pot"))
    empty = tmp_path / "no_assets"
    empty.mkdir()
    with pytest.raises(RoboTwinUnavailableError, match=r"assets are missing.*assets/embodiments"):
        make_env(_cfg(empty))
    partial = tmp_path / "partial"
    for d in ("assets/objects", "assets/background_texture", "assets/embodiments"):
        (partial / d).mkdir(parents=True)
    with pytest.raises(
        RoboTwinUnavailableError, match=r"no .*embodiments/piper/config.yml for embodiment 'piper'"
    ):
        make_env(_cfg(partial))
    with pytest.raises(ValueError, match=r"unknown embodiment.*'franka'"):
        make_env(_cfg(assets, extra={"task_config": {"embodiment": ["franka"]}}))
    (assets / "assets/embodiments/piper/config.yml").write_text("arm_joints_name: [[a, b, c, d, e, f, g]] \n")
    with pytest.raises(ValueError, match=r"embodiment 'piper' has \[7\] arm joints.*6 joints \+ 1 gripper"):
        make_env(_cfg(assets))


def test_import_failures_of_any_type_and_a_crashing_runtime_give_clear_errors(
    assets: Path, tmp_path: Path
) -> None:
    checkout = tmp_path / "checkout"
    shutil.copytree(STUB, checkout)
    vector_env = checkout / "robotwin/envs/vector_env.py"
    vector_env.write_text(
        "open('/no/assets/objects/objaverse/list.json')\n"
    )  # RoboTwin reads files at import
    with pytest.raises(RoboTwinUnavailableError, match=r"raised FileNotFoundError.*list.json"):
        make_env(_cfg(assets, extra={"robotwin_path": str(checkout)}))
    vector_env.write_text("import h5py_not_installed\n")
    with pytest.raises(
        RoboTwinUnavailableError, match=r"importing robotwin.envs.vector_env.*h5py_not_installed"
    ):
        make_env(_cfg(assets, extra={"robotwin_path": str(checkout)}))
    vector_env.write_text(
        "import os\n\nclass VectorEnv:\n    def __init__(self, **kw):\n        os._exit(3)\n"
    )
    with pytest.raises(RoboTwinUnavailableError, match=r"process ended \(exit code 3\)"):
        make_env(_cfg(assets, extra={"robotwin_path": str(checkout)}))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (
            {"task": "press_stapler", "reward_mode": "dense"},
            "reward_mode='dense'.*'sparse' for 'press_stapler'",
        ),
        ({"wrist_camera": "gripperPOV"}, "wrist_camera='gripperPOV'.*both"),
        (
            {"wrist_camera": "left", "extra": {"task_config": {"camera": {"collect_wrist_camera": False}}}},
            "wrist_camera='left'.*collect_wrist_camera'\\] is false: they are one setting",
        ),
        ({"task": None, "task_set": ["place_empty_cup"]}, "task_set.*one task per env"),
        ({"extra": {"task_config": {"step_lim": 0}}}, "step_lim.*>= 1"),
        (
            {"extra": {"task_config": {"embodiment": ["piper", "piper"]}}},
            "embodiment.*\\[left, right, distance\\]",
        ),
        (
            {"extra": {"task_config": {"task_name": "lift_pot"}}},
            "task='place_empty_cup'.*task_name'\\]='lift_pot'",
        ),
        ({"extra": {"centre_crop": False}}, "unknown keys \\['centre_crop'\\]"),
        ({"extra": {"task_config": {"embodiment": ["franka-panda"]}}}, "franka-panda'\\] have 7 joints"),
        ({"extra": {"center_crop": False}}, "image_size=224.*native \\[240, 320\\] of the D435"),
        ({"extra": {"chunk_execution": "step"}}, "chunk_execution'\\]='step'.*'chunk', 'position'"),
        ({"extra": {"task_config": {"camera": {"collect_head_camera": False}}}}, "collect_head_camera.*true"),
        ({"extra": {"seeds_path": "/no/seeds.json"}}, "seeds_path'\\]='/no/seeds.json'.*existing json"),
        ({"extra": {"construct_timeout_s": 0}}, "construct_timeout_s'\\]=0.*seconds > 0"),
        ({"extra": {"instruction": " "}}, "instruction'\\]=' '.*non-empty string"),
    ],
)
def test_bad_config_fails_fast(assets: Path, changes: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_env(_cfg(assets, **changes))


def test_task_config_seeds_and_seed_lists_reach_robotwin(assets: Path, tmp_path: Path) -> None:
    cfg = _cfg(
        assets, extra={"task_config": {"step_lim": 120, "embodiment": ["aloha-agilex"]}, "seed_base": 500}
    )
    with make_env(cfg) as env:
        tc = env.venv.attr("task_config")
        assert tc["task_name"] == TASK and tc["step_lim"] == 120 and tc["embodiment"] == ["aloha-agilex"]
        assert tc["planner_backend"] == "mplib"
        assert tc["camera"] == {
            "head_camera_type": "D435", "wrist_camera_type": "D435",
            "collect_head_camera": True, "collect_wrist_camera": False,
        }  # fmt: skip
        assert tc["domain_randomization"]["random_background"] is True  # defaults kept under overrides
        env.reset(reset_state_ids=[3, 7])
        assert [env.venv.attr(f"envs.{i}.seed") for i in range(2)] == [503, 507]
        assert env.describe_reset_state(7) == (TASK, 7)
        assert env.num_reset_states == cfg.num_trials_per_task
    assert env.venv.closed
    seeds = tmp_path / "train_seeds.json"
    seeds.write_text(json.dumps({TASK: {"success_seeds": [100000, 100004, 100006, 100009]}}))
    with make_env(_cfg(assets, num_trials_per_task=3, extra={"seeds_path": str(seeds)})) as env:
        env.reset(reset_state_ids=[2, 0])
        assert [env.venv.attr(f"envs.{i}.seed") for i in range(2)] == [100006, 100000]
        assert env.robotwin_seed(1) == 100004
    with pytest.raises(ValueError, match=r"num_trials_per_task=5.*at most the 4 seeds"):
        make_env(_cfg(assets, num_trials_per_task=5, extra={"seeds_path": str(seeds)}))
    with pytest.raises(ValueError, match=r"seeds_path.*'adjust_bottle'"):
        make_env(_cfg(assets, task="adjust_bottle", extra={"seeds_path": str(seeds)}))


@pytest.mark.parametrize("crop", [True, False])
def test_observations_head_and_wrist_images_states_and_instructions(assets: Path, crop: bool) -> None:
    size = 224 if crop else (240, 320)
    cfg = _cfg(
        assets, image_size=size,
        extra={"center_crop": crop, "task_config": {"camera": {"collect_wrist_camera": True}}},
    )  # fmt: skip
    hw = (224, 224) if crop else (240, 320)
    with make_env(cfg) as env:
        obs = env.reset(reset_state_ids=[0, 1])
        raw = env.venv.get_obs()
        assert obs["images"].shape == (2, *hw, 3) and obs["images"].dtype == np.uint8
        assert obs["wrist_images"].shape == (2, 2, *hw, 3) and obs["wrist_images"].dtype == np.uint8
        assert obs["states"].shape == (2, 14) and obs["states"].dtype == np.float32
        for i in range(2):
            np.testing.assert_array_equal(obs["images"][i], _expected_image(raw[i]["full_image"], crop))
            np.testing.assert_array_equal(
                obs["wrist_images"][i, 0], _expected_image(raw[i]["left_wrist_image"], crop)
            )
            np.testing.assert_array_equal(
                obs["wrist_images"][i, 1], _expected_image(raw[i]["right_wrist_image"], crop)
            )
            np.testing.assert_array_equal(obs["states"][i], raw[i]["state"].astype(np.float32))
        assert obs["task_descriptions"] == [str(r["instruction"]) for r in raw]
        assert all(type(t) is str for t in obs["task_descriptions"])
        assert env.action_dim == 14 and env.action_low[6] == 0 and env.action_high[13] == 1
    with make_env(_cfg(assets, wrist_camera="right")) as env:
        obs = env.reset(reset_state_ids=[0, 1])
        assert obs["wrist_images"].shape == (2, 1, 224, 224, 3)
    with make_env(_cfg(assets)) as env:
        assert env.reset()["wrist_images"] is None


def test_one_instruction_for_every_episode_leaves_pictures_states_and_rewards_as_they_are(
    assets: Path,
) -> None:
    text = "Press the stapler."

    def same_but_the_text(x: dict, y: dict) -> None:
        np.testing.assert_array_equal(x["images"], y["images"])
        np.testing.assert_array_equal(x["states"], y["states"])
        assert all(t != text for t in x["task_descriptions"]) and y["task_descriptions"] == [text, text]

    with make_env(_cfg(assets)) as plain, make_env(_cfg(assets, extra={"instruction": text})) as fixed:
        same_but_the_text(plain.reset(reset_state_ids=[0, 1]), fixed.reset(reset_state_ids=[0, 1]))
        for _ in range(2):
            x, y = plain.chunk_step(_grippers(2, 3, 0.5)), fixed.chunk_step(_grippers(2, 3, 0.5))
            same_but_the_text(x.obs, y.obs)
            np.testing.assert_array_equal(x.rewards, y.rewards)
            np.testing.assert_array_equal(x.infos["success"], y.infos["success"])


@pytest.mark.parametrize("execution", ["chunk", "position"])
def test_success_terminates_with_same_step_autoreset_and_ignores_the_rest_of_the_chunk(
    assets: Path, execution: str
) -> None:
    with make_env(_cfg(assets, extra={"reward_coef": 5.0, "chunk_execution": execution})) as env:
        env.reset(reset_state_ids=[0, 1])
        actions = _grippers(2, 6, 1.0)
        actions[0, 3:, 6] = actions[0, 3:, 13] = 0.0  # row 0 closes both grippers at chunk position 3
        res = env.chunk_step(actions)
        # one RoboTwin step per chunk reports at the chunk's last position; per position where it happens
        at = 5 if execution == "chunk" else 3
        # each row's sub-env: one step per chunk, or one per position while its episode runs (row 0 ends at 3)
        calls = [env.venv.attr(f"envs.{row}.step_calls") for row in (0, 1)]
        assert calls == ([[(6, 14)]] * 2 if execution == "chunk" else [[(1, 14)] * 4, [(1, 14)] * 6])
        assert res.terminated[0].tolist() == [t == at for t in range(6)]
        assert res.rewards[0].tolist() == [5.0 * (t == at) for t in range(6)] and res.infos["success"][0, at]
        assert not res.terminated[1].any() and not res.truncated.any()
        assert res.final_mask.tolist() == [True, False]
        assert res.final_obs["states"][0, 6] == 0.0  # the episode's last observation: grippers closed
        assert res.obs["states"][0, 6] == 1.0  # already the next episode's first observation: grippers open
        assert res.episode_metrics["success_once"][0] == 1 and res.episode_metrics["episode_len"][0] == at + 1
        assert res.episode_metrics["return"][0] == 5
        res = env.step(_grippers(2, 1, 1.0)[:, 0])
        assert res.rewards.shape == (2, 1) and not res.final_mask.any()


@pytest.mark.parametrize("execution", ["chunk", "position"])
def test_truncation_by_max_episode_steps_and_by_step_lim_and_holding(assets: Path, execution: str) -> None:
    extra = {"chunk_execution": execution}
    last = 4 if execution == "chunk" else 2
    with make_env(_cfg(assets, max_episode_steps=3, extra=extra)) as env:
        env.reset(reset_state_ids=[0, 0])
        res = env.chunk_step(_grippers(2, 5, 1.0))
        assert res.truncated[:, last].all() and res.truncated.sum() == 2 and not res.terminated.any()
        assert res.final_mask.all() and (res.episode_metrics["episode_len"] == last + 1).all()
    with make_env(_cfg(assets, extra={**extra, "task_config": {"step_lim": 2}}, auto_reset=False)) as env:
        env.reset(reset_state_ids=[0, 1])
        res = env.chunk_step(_grippers(2, 3, 1.0))
        at = 2 if execution == "chunk" else 1
        assert res.truncated[:, at].all() and res.truncated.sum() == 2 and res.final_mask.all()
        final = res.obs["states"].copy()
        res = env.chunk_step(_grippers(2, 4, 0.0))  # held: outputs dropped, obs stays the final obs
        assert not res.final_mask.any() and not res.rewards.any() and not res.terminated.any()
        np.testing.assert_array_equal(res.obs["states"], final)
        assert env.reset()["states"][:, 6].tolist() == [1, 1]  # grippers open at every reset


def test_equal_ids_give_identical_starts_and_evaluation_covers_every_trial(assets: Path) -> None:
    with make_env(
        _cfg(assets, num_envs=4, num_trials_per_task=10, group_size=2, use_fixed_reset_state_ids=True)
    ) as env:
        obs = env.reset(reset_state_ids=[5, 5, 6, 5])
        np.testing.assert_array_equal(obs["states"][0], obs["states"][1])
        np.testing.assert_array_equal(obs["images"][0], obs["images"][3])
        assert not np.array_equal(obs["images"][0], obs["images"][2])  # another seed, another scene
        np.testing.assert_array_equal(obs["states"][0], obs["states"][2])  # the same home pose
        grouped = env.reset(seed=1)
        np.testing.assert_array_equal(grouped["images"][0], grouped["images"][1])
        np.testing.assert_array_equal(grouped["images"][2], grouped["images"][3])
        seen = [env.describe_reset_state(i) for i in range(10)]
        assert seen == [(TASK, t) for t in range(10)]
        with pytest.raises(ValueError, match="reset_state_ids must lie in"):
            env.reset(reset_state_ids=[0, 1, 2, 10])


def _kill_robotwin(env) -> int:
    """SIGKILL the env's RoboTwin process (what the OS does under memory pressure) and wait until it is gone."""
    import os
    import signal
    import time

    pid = env.venv.pid
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while env.venv._proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return pid


def test_a_killed_robotwin_process_is_replaced_and_its_episodes_end_as_lost(assets: Path) -> None:
    with make_env(_cfg(assets, num_trials_per_task=1000)) as env:
        env.reset(reset_state_ids=[3, 4])
        before = env.chunk_step(_grippers(2, 2, 1.0))
        pid = _kill_robotwin(env)
        res = env.chunk_step(_grippers(2, 2, 1.0))
        assert env.venv.pid != pid
        assert res.lost.tolist() == [True, True] and res.final_mask.all()
        assert res.truncated[:, 0].all() and res.truncated.sum() == 2 and not res.terminated.any()
        assert not res.rewards.any() and not res.infos["success"].any()
        np.testing.assert_array_equal(res.final_obs["images"], before.obs["images"])  # the last obs seen
        assert res.episode_metrics["episode_len"].tolist() == [2, 2]  # the steps before the crash
        assert res.infos["worker_restarts"] == 1 and res.infos["lost_episodes"] == 2
        assert res.infos["restart_time_s"] > 0
        assert res.obs["states"][:, 6].tolist() == [1, 1]  # new episodes: grippers open at the reset
        res = env.chunk_step(_grippers(2, 3, 1.0))  # and the env steps on
        assert not res.lost.any() and not res.final_mask.any() and res.rewards.shape == (2, 3)
        assert env.fault_stats() == {
            "worker_restarts": 1.0,
            "lost_episodes": 2.0,
            "restart_time_s": pytest.approx(env.restart_time_s),
        }


def test_without_auto_reset_a_replaced_process_restarts_the_same_trials_and_ended_rows_stay_held(
    assets: Path,
) -> None:
    with make_env(_cfg(assets, num_trials_per_task=1000, auto_reset=False)) as env:
        start = env.reset(reset_state_ids=[3, 4])
        actions = _grippers(2, 2, 1.0)
        actions[0, :, 6] = actions[0, :, 13] = 0.0  # row 0 succeeds (both grippers closed) and is held
        ended = env.chunk_step(actions)
        assert ended.final_mask.tolist() == [True, False]
        _kill_robotwin(env)
        res = env.chunk_step(_grippers(2, 2, 1.0))
        assert res.lost.tolist() == [False, True] and res.final_mask.tolist() == [False, True]
        assert env.lost_episodes == 1 and env.worker_restarts == 1
        np.testing.assert_array_equal(res.obs["states"][0], ended.obs["states"][0])  # still held, final obs
        assert res.obs["task_descriptions"][1] == start["task_descriptions"][1]  # trial 4 again
        np.testing.assert_array_equal(res.obs["images"][1], start["images"][1])


def test_a_reset_that_finds_the_robotwin_process_dead_starts_a_new_one(assets: Path) -> None:
    with make_env(_cfg(assets)) as env:
        env.reset(reset_state_ids=[0, 1])
        _kill_robotwin(env)
        obs = env.reset(reset_state_ids=[2, 3])
        assert env.worker_restarts == 1 and env.lost_episodes == 0
        assert [
            t.endswith(f"seed {env.robotwin_seed(i)})") for t, i in zip(obs["task_descriptions"], [2, 3])
        ] == [True, True]
        assert not env.chunk_step(_grippers(2, 1, 1.0)).lost.any()


def test_a_robotwin_process_stuck_in_a_step_is_killed_and_replaced(assets: Path) -> None:
    hooks = Path(__file__).with_name("robotwin_stub_hooks.py")
    with make_env(_cfg(assets, extra={"call_timeout_s": 2})) as env:
        env.reset(reset_state_ids=[0, 1])
        env.venv.run(hooks, "stall_steps", row=1, seconds=30)
        pid = env.venv.pid
        res = env.chunk_step(_grippers(2, 1, 1.0))
        assert env.venv.pid != pid and env.worker_restarts == 1
        assert res.lost.tolist() == [True, True] and res.truncated[:, 0].all()
        assert not env.chunk_step(_grippers(2, 1, 1.0)).lost.any()  # the new process does not stall


def test_a_step_past_the_processes_own_bound_kills_the_process_and_a_reset_replaces_it(assets: Path) -> None:
    from vla_envs.robotwin import RoboTwinProcessDied

    hooks = Path(__file__).with_name("robotwin_stub_hooks.py")
    with make_env(_cfg(assets)) as env:
        env.reset(reset_state_ids=[0, 1])
        process = env.venv
        with pytest.raises(RoboTwinProcessDied, match=r"took more than 1 s.*the RoboTwin process was killed"):
            process.run(hooks, "exceed_step_bound")
        assert process.closed and process._proc.poll() is not None
        env.reset(reset_state_ids=[0, 1])
        assert env.venv is not process and env.worker_restarts == 1
