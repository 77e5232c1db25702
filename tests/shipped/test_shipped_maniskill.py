"""The shipped ManiSkill3 (PutOnPlateInScene25 on the stand-in assets; all `long`) configs train one iteration on the CPU, shrunk as `shipped_runs.shrunk_overrides` says."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

# --import-mode=importlib: put the shared module beside this file on the path
sys.path.insert(0, str(Path(__file__).parent))
import shipped_runs

from train_embodied.config import load_train_config

TINY = "maniskill_put_on_plate_ppo_tiny_cpu"
MAIN_TRAIN_EPISODE_IDS = (
    802_816  # PutOnPlateInScene25Main-v3, obj_set=train: 16 carrots x 16 overlays x 784 x 4
)


@pytest.mark.slow
@pytest.mark.parametrize("name", shipped_runs.shipped("maniskill"))
def test_shipped_config_trains_one_iteration_on_cpu(name: str, tmp_path: Path) -> None:
    shipped_runs.train_one_iteration_and_check(name, tmp_path)


def test_tiny_cpu_config_evaluates_on_starts_no_demo_and_no_training_episode_uses() -> None:
    """The held-out evaluation's task episodes (carrot, overlay, placement, turn) are none of the warm start's demo
    episodes nor of the episodes training draws from (each trial is a fixed draw over the task's episode ids)."""
    from vla_envs.demos import DEMO_TRIAL_OFFSET
    from vla_envs.maniskill.put_on_plate import episode_ids

    tc = load_train_config(TINY, [], check_paths=False)
    train, ev, sft = tc.env_train, tc.env_eval, tc.sft
    assert train.task == ev.task == "PutOnPlateInScene25Main-v3"
    assert train.extra.get("obj_set", "train") == ev.extra.get("obj_set", "train") == "train"
    total = MAIN_TRAIN_EPISODE_IDS
    trained = set(
        episode_ids(np.arange(train.num_trials_per_task), train.num_trials_per_task, total).tolist()
    )
    demo_trials = DEMO_TRIAL_OFFSET + sft.demo_seed * sft.num_demos + np.arange(sft.num_demos)
    demos = set(episode_ids(demo_trials, 1, total).tolist())
    first = tc.eval_run.trial_offset
    held_out = episode_ids(first + np.arange(tc.eval_run.num_episodes), ev.num_trials_per_task, total)
    assert len(set(held_out.tolist())) == tc.eval_run.num_episodes
    assert not set(held_out.tolist()) & (trained | demos)
