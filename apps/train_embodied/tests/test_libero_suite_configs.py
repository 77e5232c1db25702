"""Every LIBERO suite the reference guides name (spatial, object, goal, 90, 10, 130) has a GRPO config and an
evaluation-only twin; each composes with its suite's tasks, episode limit, statistics key and evaluation size
(every task x 50 trials, as the guides evaluate). Their runs are libero_10's (tests/shipped/)."""

from __future__ import annotations

import pytest

from train_embodied.config import list_configs, load_train_config

SUITES = {"spatial": 10, "object": 10, "goal": 10, "90": 90, "10": 10, "130": 130}
# OpenVLA-OFT's LIBERO evaluation episode limits, rounded up to whole 8-action chunks
EPISODE_STEPS = {"spatial": 224, "object": 280, "goal": 304, "90": 400, "10": 512, "130": 520}


@pytest.mark.parametrize("suite", list(SUITES))
def test_suite_config_and_its_eval_twin_compose(suite: str) -> None:
    name = f"libero_{suite}_grpo_openvlaoft"
    assert {name, f"{name}_eval"} <= set(list_configs())
    train = load_train_config(name, check_paths=False)
    evaluation = load_train_config(f"{name}_eval", check_paths=False)
    for tc in (train, evaluation):
        assert tc.env_train.task_set == tc.env_eval.task_set == f"libero_{suite}"
        assert tc.env_train.max_episode_steps == EPISODE_STEPS[suite]
        assert tc.train_run.max_steps_per_rollout_epoch % tc.actor.model.num_action_chunks == 0
        assert tc.eval_run.num_episodes == SUITES[suite] * 50
        assert tc.actor.model.unnorm_key == f"libero_{suite}_no_noops"
        assert tc.algorithm.adv_type == "grpo" and tc.env_train.group_size == tc.algorithm.group_size == 8
    assert not train.runner.only_eval and evaluation.runner.only_eval
    assert train.runner.logger.experiment_name == name
    assert evaluation.runner.logger.experiment_name == f"{name}_eval"
