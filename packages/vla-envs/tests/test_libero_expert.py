"""The LIBERO drawer expert (privileged state) closes the drawer from many starts of real LIBERO, judged by LIBERO's own
goal predicate, and the demos recorded with it follow the env config (the registered demo source of `libero`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vla_envs import EnvConfig, demo_settings, generate_demos, load_demos  # first: sets MUJOCO_GL

pytest.importorskip(
    "libero.libero", reason="LIBERO not importable: pip install 'vla-envs[libero]'", exc_type=ImportError
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:The 'warn' method is deprecated:DeprecationWarning"),  # robosuite 1.4
]
TASK = "KITCHEN_SCENE10_close_the_top_drawer_of_the_cabinet"


def _cfg(task: str, init_states: str, **changes) -> EnvConfig:
    base = {
        "env_type": "libero", "task": task, "num_envs": 1, "envs_per_worker": 0, "render": False,
        "action_repeat": 4, "max_episode_steps": 25,
        "num_trials_per_task": 60000 if init_states == "sampled" else 50, "extra": {"init_states": init_states},
    }  # fmt: skip
    return EnvConfig(**{**base, **changes})


def expert_successes(cfg: EnvConfig, trials: list[int]) -> tuple[list[bool], list[int]]:
    """Run the expert from each trial of the env of `cfg`; (success per trial, decisions per trial)."""
    from vla_envs.libero.drawer_expert import DrawerCloseExpert
    from vla_envs.libero.options import resolve_options
    from vla_envs.libero.sim import LiberoSim
    from vla_envs.libero.suites import resolve_tasks

    sim = LiberoSim(cfg, resolve_tasks(cfg.task, None), resolve_options(cfg))
    successes, lengths = [], []
    try:
        for trial in trials:
            sim.reset(trial)
            expert = DrawerCloseExpert(sim.current.env.env)
            expert.reset()
            success, t = False, 0
            while not success and t < cfg.max_episode_steps:
                _, _, success, _ = sim.step(expert.act())
                t += 1
            successes.append(success)
            lengths.append(t)
    finally:
        sim.close()
    return successes, lengths


def test_expert_closes_the_drawer_from_held_out_sampled_starts() -> None:
    """20 of the starts the tiny config evaluates on (trials 50000+; `long` runs 100 and the 50 fixed states)."""
    successes, lengths = expert_successes(_cfg(TASK, "sampled"), list(range(50000, 50020)))
    assert sum(successes) == 20, (successes, lengths)
    assert max(lengths) <= 16, lengths  # measured 10-14 decisions at action repeat 4


@pytest.mark.long
@pytest.mark.parametrize(
    "task",
    [TASK, "KITCHEN_SCENE5_close_the_top_drawer_of_the_cabinet"],
)
def test_expert_closes_every_drawer_task_from_many_starts(task: str) -> None:
    sampled, _ = expert_successes(_cfg(task, "sampled"), list(range(50000, 50100)))
    fixed, _ = expert_successes(_cfg(task, "fixed"), list(range(50)))
    assert sum(sampled) >= 98 and sum(fixed) >= 49, (task, sum(sampled), sum(fixed))


def test_expert_refuses_a_task_it_cannot_solve() -> None:
    from vla_envs.libero.drawer_expert import DrawerCloseExpert
    from vla_envs.libero.options import resolve_options
    from vla_envs.libero.sim import LiberoSim
    from vla_envs.libero.suites import resolve_tasks

    cfg = _cfg("KITCHEN_SCENE6_close_the_microwave", "fixed")
    sim = LiberoSim(cfg, resolve_tasks(cfg.task, None), resolve_options(cfg))
    try:
        sim.reset(0)
        with pytest.raises(ValueError, match="closes one drawer"):
            DrawerCloseExpert(sim.current.env.env)
    finally:
        sim.close()
    for task in (
        "KITCHEN_SCENE6_close_the_microwave",
        "KITCHEN_SCENE4_close_the_bottom_drawer_of_the_cabinet",
    ):
        with pytest.raises(ValueError, match="scripted-expert demos for the tasks"):  # no demos it would fail
            demo_settings(_cfg(task, "fixed"), episodes_per_task=1)


def test_demos_follow_the_env_config_from_starts_no_run_uses(tmp_path: Path) -> None:
    """`demo_settings` + `generate_demos` (what `vla-sft` calls) record the adapter's observations from sampled starts
    at trials >= 100000, even for an env on LIBERO's fixed states; the recorded actions are the expert's."""
    cfg = _cfg(TASK, "fixed", render=True, image_size=32, action_repeat=4)
    settings = demo_settings(cfg, episodes_per_task=2, seed=1)
    assert settings["env_type"] == "libero" and settings["tasks"] == [TASK]
    json.dumps(settings)  # a demo folder's stamp
    meta = generate_demos(tmp_path, settings, num_workers=0, progress=False)
    assert meta["num_episodes"] == 2 and meta["success_rate"] == 1.0
    assert [e["trial"] for e in meta["episodes"]] == [100002, 100003]
    data = load_demos(tmp_path)
    assert data["images"].shape[1:] == (32, 32, 3) and data["images"].std() > 10
    assert data["states"].shape[1:] == (8,) and data["actions"].shape[1:] == (7,)
    assert data["task_descriptions"][0] == "close the top drawer of the cabinet"
    np.testing.assert_array_equal(data["actions"][:, 6], 1.0)  # gripper closed, no rotation
    np.testing.assert_array_equal(data["actions"][:, 3:6], 0.0)
    assert data["successes"].sum() == 2 and data["rewards"].sum() == 2.0


def test_noisy_demos_hold_states_off_the_path_labelled_with_the_experts_action(tmp_path: Path) -> None:
    """`sft.demo_options={action_noise: s}` reaches the demos through `demo_settings`: the same starts run with noise
    visit other states (the executed deltas were perturbed) while every recorded action is still the expert's own
    for the state it saw (rotation 0, gripper closed, positions within [-1, 1]); a negative noise is refused."""
    cfg = _cfg(TASK, "sampled", render=True, image_size=32, action_repeat=4)
    with pytest.raises(ValueError, match=r"action_noise=-0\.1 is invalid"):
        demo_settings(cfg, episodes_per_task=1, action_noise=-0.1)
    runs = {}
    for noise in (0.0, 0.15):
        settings = demo_settings(cfg, episodes_per_task=1, seed=3, action_noise=noise)
        assert settings["action_noise"] == noise
        generate_demos(tmp_path / str(noise), settings, num_workers=0, progress=False)
        runs[noise] = load_demos(tmp_path / str(noise))
    clean, noisy = runs[0.0], runs[0.15]
    np.testing.assert_array_equal(clean["states"][0], noisy["states"][0])  # the same start
    n = min(len(clean["states"]), len(noisy["states"]))
    assert (
        np.abs(clean["states"][1:n, :3] - noisy["states"][1:n, :3]).max() > 0.005
    )  # the hand went elsewhere
    np.testing.assert_array_equal(
        noisy["actions"][:, 3:], np.tile([0.0, 0.0, 0.0, 1.0], (len(noisy["actions"]), 1))
    )
    assert np.abs(noisy["actions"][:, :3]).max() <= 1.0
