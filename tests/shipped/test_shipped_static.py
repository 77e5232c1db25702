"""Checks of the shipped configs that build nothing: the `long` list, evaluation starts disjoint from training
starts, RoboTwin OpenPI scenes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from train_embodied.config import list_configs, load_train_config

# --import-mode=importlib: put the shared module beside this file on the path
sys.path.insert(0, str(Path(__file__).parent))
import shipped_runs


def test_long_cases_name_shipped_configs() -> None:
    assert set(shipped_runs.LONG) <= set(list_configs()), sorted(set(shipped_runs.LONG) - set(list_configs()))
    # every config runs in its family's file
    families = {name.split("_", 1)[0] for name in list_configs()}
    assert families <= set(shipped_runs.FAMILIES), sorted(families - set(shipped_runs.FAMILIES))


@pytest.mark.parametrize("name", [n for n in list_configs() if n not in shipped_runs.SHARED_STARTS])
def test_evaluation_starts_are_disjoint_from_training_starts(name: str) -> None:
    tc = load_train_config(name, [], check_paths=False)
    shared = shipped_runs.start_keys(tc, "train") & shipped_runs.start_keys(tc, "eval")
    assert not shared, (
        f"{name}: {len(shared)} evaluation starts are training starts, e.g. {sorted(shared)[:3]}"
    )


@pytest.mark.parametrize(
    "name", [n for n in list_configs() if n.startswith("robotwin_adjust_bottle_ppo_OpenPI")]
)
def test_robotwin_openpi_configs_run_demo_clean_scenes(name: str) -> None:
    """The guide: "all OpenPI models are trained under the demo_clean setting" (RoboTwin's task config
    demo_clean.yml: no random background, no clutter, fixed light, fixed table height)."""
    from vla_envs.robotwin.options import resolve_options

    tc = load_train_config(name, [], check_paths=False)
    for env in (tc.env_train, tc.env_eval):
        randomization = resolve_options(env).task_config["domain_randomization"]
        assert randomization == {
            "random_background": False,
            "cluttered_table": False,
            "clean_background_rate": 1,
            "random_head_camera_dis": 0,
            "random_table_height": 0,
            "random_light": False,
            "crazy_random_light_rate": 0,
        }


def test_robotwin_grpo_config_shares_the_ppo_configs_task_and_warm_start() -> None:
    """`robotwin_grpo_tiny_cpu` is `robotwin_ppo_tiny_cpu`'s task, policy and demos with GRPO's update: the two
    must not drift apart in what a user compares them on (the environment, the model, the demos)."""
    import dataclasses

    ppo = load_train_config("robotwin_ppo_tiny_cpu", [], check_paths=False)
    grpo = load_train_config("robotwin_grpo_tiny_cpu", [], check_paths=False)

    def fields(section, *allowed_to_differ: str) -> dict:
        values = dataclasses.asdict(section)
        return {k: v for k, v in values.items() if k not in allowed_to_differ}

    # GRPO's envs run in same-start groups; the video folders name the run
    own = ("group_size", "video")
    assert fields(grpo.env_train, *own) == fields(ppo.env_train, *own)
    assert fields(grpo.env_eval, "video") == fields(ppo.env_eval, "video")
    assert fields(grpo.actor.model, "add_value_head") == fields(ppo.actor.model, "add_value_head")
    assert fields(grpo.sft, "steps") == fields(ppo.sft, "steps")
