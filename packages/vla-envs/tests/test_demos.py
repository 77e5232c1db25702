"""Scripted-expert demos: success rate, on-disk format, loader, CLI, same pipeline as the env."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vla_envs import EnvConfig
from vla_envs.cli import main as cli_main
from vla_envs.demos import DEMO_TRIAL_OFFSET, load_demos
from vla_envs.metaworld.demos import generate_metaworld_demos

pytest.importorskip("metaworld")


@pytest.mark.slow
def test_generate_demos_in_workers_and_load(tmp_path) -> None:
    tasks = ["drawer-close-v3", "button-press-topdown-v3"]
    meta = generate_metaworld_demos(
        tmp_path, tasks=tasks, episodes_per_task=4, image_size=48, action_repeat=4, max_episode_steps=50,
        num_workers=2, episodes_per_job=2, progress=False,
    )  # fmt: skip
    assert meta["num_episodes"] == 8 and meta["success_rate"] >= 0.75
    on_disk = json.loads((tmp_path / "meta.json").read_text())
    assert on_disk["format"] == "vla-envs-demos" and len(on_disk["shards"]) == 4
    data = load_demos(tmp_path)
    n = meta["num_steps"]
    assert data["images"].shape == (n, 48, 48, 3) and data["images"].dtype == np.uint8
    assert data["states"].shape == (n, 39) and data["actions"].shape == (n, 4)
    assert data["actions"].dtype == np.float32 and np.abs(data["actions"]).max() <= 1.0
    assert len(data["task_descriptions"]) == n and data["task_descriptions"][0] == "push the drawer closed"
    assert sorted(set(data["episode_index"].tolist())) == list(range(8))
    # every successful episode ends on its success step
    ends = np.flatnonzero(np.diff(np.append(data["episode_index"], -1)) != 0)
    for ep, end in zip(meta["episodes"], ends, strict=True):
        assert bool(data["successes"][end]) == ep["success"]
    only = load_demos(tmp_path, only_success=True)
    assert len(only["actions"]) == sum(e["length"] for e in meta["episodes"] if e["success"])

    # same observation pipeline as the env adapter: the first demo frame equals the adapter's render
    from vla_envs.metaworld.sim import MetaWorldSim

    cfg = EnvConfig(
        env_type="metaworld",
        task="drawer-close-v3",
        image_size=48,
        action_repeat=4,
        num_trials_per_task=10 * DEMO_TRIAL_OFFSET,
    )
    sim = MetaWorldSim(cfg, ["drawer-close-v3"], goal_observable=True)
    try:
        first = sim.reset(meta["episodes"][0]["trial"])
    finally:
        sim.close()
    np.testing.assert_array_equal(first["images"], data["images"][0])
    np.testing.assert_allclose(first["states"], data["states"][0])


def test_cli_demos_in_process(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "d"
    code = cli_main(
        ["demos", "metaworld", "--tasks", "drawer-close-v3", "--episodes", "1", "--image-size", "32",
         "--action-repeat", "4", "--workers", "0", "--out", str(out)]
    )  # fmt: skip
    assert code == 0 and "wrote 1 episodes" in capsys.readouterr().out
    assert load_demos(out)["images"].shape[1:] == (32, 32, 3)
    with pytest.raises(ValueError, match="valid tasks"):
        cli_main(["demos", "metaworld", "--tasks", "drawer-shut", "--episodes", "1", "--out", str(out)])


def test_demo_settings_follow_the_env_config() -> None:
    from vla_envs import EnvConfig, demo_settings

    cfg = EnvConfig(
        env_type="metaworld", task_set="MT10", image_size=48, wrist_camera="gripperPOV", action_repeat=2,
        max_episode_steps=30, extra={"hide_far_meshes": True},
    )  # fmt: skip
    s = demo_settings(cfg, episodes_per_task=3, seed=7)
    assert len(s["tasks"]) == 10 and s["tasks"][0] == "reach-v3"
    assert (s["image_size"], s["wrist_camera"], s["action_repeat"], s["max_episode_steps"]) == (
        48, "gripperPOV", 2, 30,
    )  # fmt: skip
    assert s["camera"] == "corner2" and s["hide_far_meshes"] and (s["episodes_per_task"], s["seed"]) == (3, 7)
    assert s["env_type"] == "metaworld"
    with pytest.raises(ValueError, match=r"one PutOnPlateInScene25 task.*got task='PickCube-v1'"):
        demo_settings(EnvConfig(env_type="maniskill", task="PickCube-v1"), episodes_per_task=1)
    with pytest.raises(
        ValueError, match=r"LIBERO has scripted-expert demos for the tasks \[.*\] only, got"
    ) as info:
        demo_settings(EnvConfig(env_type="libero", task_set="libero_10"), episodes_per_task=1)
    assert "KITCHEN_SCENE10_close_the_top_drawer_of_the_cabinet" in str(info.value)
