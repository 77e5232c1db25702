"""One `EnvAdapter` record is all a new env type needs: a toy simulator defined here (a point on a line that must
reach its task's goal) is registered with one call, and config checks, `make_env`, task listing, result-table
grouping, scripted demos and the `vla-envs` command line all find it without any change to vla_envs."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vla_envs import (
    EnvAdapter,
    EnvConfig,
    ScriptedDemos,
    TaskGrouping,
    adapters,
    check_env_config,
    check_env_offload,
    demo_env_types,
    demo_settings,
    evaluation_table,
    generate_demos,
    get_adapter,
    list_env_types,
    list_tasks,
    load_demos,
    make_env,
    register_adapter,
    task_grouping,
    unregister_adapter,
)
from vla_envs.cli import main as cli_main
from vla_envs.config import check_extra_keys
from vla_envs.demos import stack_steps, write_demos
from vla_envs.registry import resolve_ref
from vla_envs.sim import SimSpec
from vla_envs.vector import VectorEnv

ENV_TYPE = "toy_line"
GOALS = {"reach-near": 2.0, "reach-far": 5.0}  # task -> goal position; every start is at 0
GROUP_OF = {"reach-near": "near", "reach-far": "far"}
EXTRA_KEYS = ("step_size",)


class LineSim:
    """One point on a line: action [1] in [-1, 1] moves it by `step_size * action`; success within 0.5 of goal."""

    def __init__(self, cfg: EnvConfig, spec: SimSpec) -> None:
        self.cfg, self.spec = cfg, spec
        self.step_size = float(spec.options["step_size"])
        self.x, self.task = 0.0, spec.tasks[0]

    def _obs(self) -> dict[str, Any]:
        h, w = self.cfg.image_hw
        return {
            "images": np.full((h, w, 3), int(10 * self.x) % 256, np.uint8),
            "wrist_images": None,
            "states": np.array([self.x, GOALS[self.task]], np.float32),
            "task_descriptions": f"move the point to {GOALS[self.task]:g}",
        }

    def reset(self, reset_state_id: int) -> dict[str, Any]:
        self.task = self.spec.tasks[reset_state_id // self.cfg.num_trials_per_task]
        self.x = 0.0
        return self._obs()

    def step(self, action: np.ndarray) -> tuple[dict[str, Any], float, bool, bool]:
        self.x += self.step_size * float(action[0])
        success = abs(self.x - GOALS[self.task]) < 0.5
        return self._obs(), float(success), success, False

    def close(self) -> None:
        pass


def build_line_sims(cfg: EnvConfig, spec: SimSpec, rows: list[int]) -> list[LineSim]:
    return [LineSim(cfg, spec) for _ in rows]


def line_spec(cfg: EnvConfig) -> SimSpec:
    """The adapter's config check: tasks and `extra` keys, each error naming `EnvConfig.<key>`."""
    check_extra_keys(cfg.extra, EXTRA_KEYS, ENV_TYPE)
    if cfg.task is not None and cfg.task not in GOALS:
        raise ValueError(f"EnvConfig.task={cfg.task!r} is invalid: one of {sorted(GOALS)}")
    tasks = [cfg.task] if cfg.task else list(cfg.task_set or GOALS)
    step_size = cfg.extra.get("step_size", 1.0)
    if not 0 < step_size <= 1:
        raise ValueError(f"EnvConfig.extra['step_size']={step_size!r} is invalid: in (0, 1]")
    return SimSpec(
        builder=f"{__name__}:build_line_sims",
        action_dim=1,
        action_low=np.full(1, -1.0, np.float32),
        action_high=np.full(1, 1.0, np.float32),
        tasks=tasks,
        options={"step_size": step_size},
    )


def make_line_env(cfg: EnvConfig) -> VectorEnv:
    return VectorEnv(cfg, line_spec(cfg))


def line_grouping(tasks: Sequence[str]) -> TaskGrouping:
    unknown = [t for t in tasks if t not in GROUP_OF]
    if unknown:
        raise ValueError(f"unknown toy_line task(s) {unknown}")
    groups = {t: GROUP_OF[t] for t in tasks}
    order = [g for g in ("near", "far") if g in groups.values()]
    return TaskGrouping(groups, order, {g: g.title() for g in order})


def expert_action(states: np.ndarray) -> np.ndarray:
    """[B, 1]: full speed towards the goal (states [B, 2] = position, goal)."""
    return np.clip(states[:, 1:2] - states[:, 0:1], -1.0, 1.0).astype(np.float32)


def line_demo_settings(cfg: EnvConfig, *, episodes_per_task: int, seed: int = 0) -> dict[str, Any]:
    return {
        "tasks": line_spec(cfg).tasks,
        "episodes_per_task": episodes_per_task,
        "image_size": int(cfg.image_hw[0]),
        "max_episode_steps": cfg.max_episode_steps,
        "seed": seed,
    }


def generate_line_demos(
    out_dir: str | Path,
    *,
    tasks: list[str],
    episodes_per_task: int,
    image_size: int,
    max_episode_steps: int,
    seed: int = 0,
    num_workers: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """The expert driven through the adapter's own env (in this process), written in the shared demo format."""
    cfg = EnvConfig(
        env_type=ENV_TYPE, task_set=list(tasks), num_envs=1, envs_per_worker=0, image_size=image_size,
        max_episode_steps=max_episode_steps, num_trials_per_task=episodes_per_task, auto_reset=False, seed=seed,
    )  # fmt: skip
    steps: dict[str, list[Any]] = {k: [] for k in ("images", "wrist_images", "states", "actions", "rewards")}
    steps.update(successes=[], episode_index=[], step_index=[])
    episodes = []
    with make_env(cfg) as env:
        for trial_id in range(len(tasks) * episodes_per_task):
            obs = env.reset(reset_state_ids=[trial_id])
            for t in range(max_episode_steps):
                action = expert_action(obs["states"])
                res = env.step(action)
                for key in ("images", "states"):
                    steps[key].append(obs[key][0])
                steps["wrist_images"].append(None)
                steps["actions"].append(action[0])
                steps["rewards"].append(res.rewards[0, 0])
                steps["successes"].append(res.terminated[0, 0])
                steps["episode_index"].append(trial_id)
                steps["step_index"].append(t)
                obs = res.obs
                if res.final_mask[0]:
                    break
            task = env.tasks[trial_id // episodes_per_task]
            episodes.append(
                {"task": task, "instruction": task, "trial": trial_id, "length": t + 1,
                 "success": bool(res.terminated[0, 0])}
            )  # fmt: skip
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return write_demos(out, cfg, [{"arrays": stack_steps(steps), "episodes": episodes}])


def line_demos_from_cli(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "tasks": args.tasks.split(","),
        "episodes_per_task": args.episodes,
        "image_size": args.image_size,
        "max_episode_steps": args.max_episode_steps or 10,
        "seed": args.seed,
    }


TOY_LINE = EnvAdapter(
    name=ENV_TYPE,
    factory=make_line_env,
    task_lister=lambda: list(GOALS),
    check_config=line_spec,
    task_grouping=line_grouping,
    demos=ScriptedDemos(
        generate=generate_line_demos, settings=line_demo_settings, from_cli=line_demos_from_cli
    ),
)


@pytest.fixture
def toy_line() -> Iterator[EnvAdapter]:
    register_adapter(TOY_LINE)
    yield TOY_LINE
    unregister_adapter(ENV_TYPE)


def test_an_unregistered_env_type_is_refused_everywhere() -> None:
    assert ENV_TYPE not in list_env_types()
    with pytest.raises(ValueError, match=f"EnvConfig.env_type='{ENV_TYPE}' is not one of"):
        EnvConfig(env_type=ENV_TYPE)
    for lookup in (list_tasks, lambda name: task_grouping(name, ["reach-near"])):
        with pytest.raises(ValueError, match=f"unknown env_type '{ENV_TYPE}'"):
            lookup(ENV_TYPE)


def test_config_check_build_and_step_go_through_the_record(toy_line: EnvAdapter) -> None:
    assert get_adapter(ENV_TYPE) is toy_line and ENV_TYPE in list_env_types()
    check_env_config(EnvConfig(env_type=ENV_TYPE, task="reach-far", extra={"step_size": 0.5}))
    with pytest.raises(ValueError, match=r"EnvConfig.task='reach-mars' is invalid"):
        check_env_config(EnvConfig(env_type=ENV_TYPE, task="reach-mars"))
    with pytest.raises(ValueError, match=r"unknown keys \['speed'\] for env_type='toy_line'"):
        check_env_config(EnvConfig(env_type=ENV_TYPE, extra={"speed": 2}))
    with pytest.raises(ValueError, match=r"extra\['step_size'\]=3 is invalid"):
        make_env({"env_type": ENV_TYPE, "extra": {"step_size": 3}})

    cfg = EnvConfig(env_type=ENV_TYPE, num_envs=2, envs_per_worker=0, image_size=8, max_episode_steps=4)
    with make_env(cfg) as env:
        assert env.tasks == ["reach-near", "reach-far"]
        obs = env.reset(reset_state_ids=[0, cfg.num_trials_per_task])  # trial 0 of each task
        assert obs["images"].shape == (2, 8, 8, 3) and obs["images"].dtype == np.uint8
        assert obs["states"].dtype == np.float32 and obs["task_descriptions"] == [
            "move the point to 2", "move the point to 5",
        ]  # fmt: skip
        results = [env.step(expert_action(obs["states"]))]
        for _ in range(3):
            results.append(env.step(expert_action(results[-1].obs["states"])))
    # the near goal is reached every 2 steps (terminated, success, same-step autoreset); the far one is cut at 4
    assert [r.terminated[:, 0].tolist() for r in results] == [[False, False], [True, False]] * 2
    assert results[3].truncated[:, 0].tolist() == [False, True]
    assert results[1].episode_metrics["success_once"][0] == 1.0
    assert results[3].episode_metrics["success_once"][1] == 0.0


def test_tasks_and_result_groups_come_from_the_record(toy_line: EnvAdapter, capsys) -> None:
    assert list_tasks(ENV_TYPE) == ["reach-near", "reach-far"]
    assert cli_main(["tasks", ENV_TYPE]) == 0 and capsys.readouterr().out.split() == [
        "reach-near",
        "reach-far",
    ]
    grouping = task_grouping(ENV_TYPE, ["reach-far", "reach-near"])
    assert grouping.order == ["near", "far"] and grouping.labels == {"near": "Near", "far": "Far"}
    table = evaluation_table(["reach-near", "reach-far", "reach-far"], [1, 0, 1], grouping)
    assert table["groups"]["near"]["success_once"] == 1.0 and table["groups"]["far"]["success_once"] == 0.5
    with pytest.raises(ValueError, match="unknown toy_line task"):
        task_grouping(ENV_TYPE, ["reach-mars"])


def test_demos_from_an_env_config_and_from_the_command_line(toy_line: EnvAdapter, tmp_path, capsys) -> None:
    assert ENV_TYPE in demo_env_types()
    cfg = EnvConfig(env_type=ENV_TYPE, task="reach-far", image_size=8, max_episode_steps=10)
    settings = demo_settings(cfg, episodes_per_task=2, seed=3)
    assert settings["env_type"] == ENV_TYPE and settings["tasks"] == ["reach-far"]
    meta = generate_demos(tmp_path / "cfg", settings, num_workers=0, progress=False)
    data = load_demos(tmp_path / "cfg")
    assert meta["env_type"] == ENV_TYPE and meta["num_episodes"] == 2 and meta["success_rate"] == 1.0
    assert data["images"].shape == (10, 8, 8, 3) and data["actions"].shape == (10, 1)  # 5 steps to x = 5
    np.testing.assert_array_equal(data["successes"], [0, 0, 0, 0, 1] * 2)

    out = tmp_path / "cli"
    argv = [
        "demos",
        ENV_TYPE,
        "--tasks",
        "reach-near",
        "--episodes",
        "1",
        "--image-size",
        "4",
        "--out",
        str(out),
    ]
    assert cli_main(argv) == 0 and "wrote 1 episodes (2 steps, success rate 1.000)" in capsys.readouterr().out
    assert load_demos(out)["images"].shape == (2, 4, 4, 3)


def test_registering_a_name_twice_needs_overwrite(toy_line: EnvAdapter) -> None:
    register_adapter(toy_line)  # the same record again: a no-op
    other = EnvAdapter(name=ENV_TYPE, factory=make_line_env)
    with pytest.raises(ValueError, match="env type 'toy_line' is already registered"):
        register_adapter(other)
    register_adapter(other, overwrite=True)
    assert get_adapter(ENV_TYPE) is other and task_grouping(ENV_TYPE, ["x"]) == TaskGrouping()
    with pytest.raises(
        ValueError,
        match=r"scripted-expert demos exist for env_type \['libero', 'maniskill', 'metaworld', 'robotwin'\] only",
    ):
        demo_settings(EnvConfig(env_type=ENV_TYPE), episodes_per_task=1)


def test_every_built_in_record_names_importable_functions() -> None:
    """The lazy "module:attr" references of the built-in adapters resolve (importing adapters, no simulator)."""
    built_in = {a.name: a for a in adapters()}
    assert {"libero", "maniskill", "metaworld", "robotwin"} <= set(built_in)
    for adapter in built_in.values():
        demos = adapter.demos
        refs = [adapter.factory, adapter.task_lister, adapter.check_config, adapter.task_grouping]
        refs += [] if demos is None else [demos.generate, demos.settings, demos.from_cli]
        refs += [] if isinstance(adapter.offload, bool) else [adapter.offload]
        for ref in refs:
            assert ref is None or callable(resolve_ref(ref)), (adapter.name, ref)


def test_offload_is_what_the_record_declares(toy_line: EnvAdapter) -> None:
    """`env.enable_offload` is checked against the record: refused by name for a record without offload, allowed
    for one that declares it, and a record's own check decides per configuration."""
    cfg = EnvConfig(env_type=ENV_TYPE)
    with pytest.raises(ValueError, match=f"env_type='{ENV_TYPE}' declares no offload"):
        check_env_offload(cfg)

    def needs_a_worker_process(c: EnvConfig) -> None:
        if c.envs_per_worker == 0:
            raise ValueError("EnvConfig.envs_per_worker=0 keeps the simulators in this process")

    for offload in (True, needs_a_worker_process):
        register_adapter(dataclasses.replace(toy_line, offload=offload), overwrite=True)
        check_env_offload(cfg)
    with pytest.raises(ValueError, match="envs_per_worker=0"):
        check_env_offload(EnvConfig(env_type=ENV_TYPE, envs_per_worker=0))
    check_env_offload(EnvConfig(env_type="metaworld", task="reach-v3"))
    with pytest.raises(ValueError, match="sim_backend"):
        check_env_offload(EnvConfig(env_type="maniskill", task="PickCube-v1", extra={"sim_backend": "gpu"}))
