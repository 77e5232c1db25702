"""The app's multi-task pieces without simulators: GRPO groups are one task each and take the tasks in turn, the
per-task / per-group evaluation metrics and printed tables, and task-balanced SFT batches."""

from __future__ import annotations

import numpy as np
import torch

from train_embodied import seeds
from train_embodied.config import load_train_config
from train_embodied.evaluation import (
    episode_tasks,
    eval_table_metrics,
    eval_tables_text,
    held_out_reset_ids,
)
from train_embodied.run_workers import train_env_configs
from train_embodied.seeds import stream_seed
from train_embodied.sft import task_balanced_indices
from train_embodied.starts import group_reset_ids, train_reset_ids
from vla_envs.evaluation import evaluation_table, task_grouping
from vla_envs.metaworld import MT10_TASKS


def test_mt10_grpo_groups_are_one_task_each_and_cover_every_task() -> None:
    tc = load_train_config("metaworld_mt10_grpo_tiny_cpu", [], check_paths=False)
    trials = tc.env_train.num_trials_per_task
    draws = set()
    for epoch in range(5):
        ids = group_reset_ids(tc, len(MT10_TASKS), epoch)
        groups = ids.reshape(-1, tc.algorithm.group_size)
        assert (groups == groups[:, :1]).all()  # a group shares one start, so one task
        # 10 groups: every task once per iteration, group k on task k (each row keeps its task and simulator)
        assert (groups[:, 0] // trials).tolist() == list(range(10))
        draws.add(tuple(groups[:, 0] % trials))
    assert len(draws) == 5  # new trials every iteration
    # the training env lays its rows out alike, so each row pre-builds the one task it runs (simulator memory),
    # whether or not the config sets env.train.use_fixed_reset_state_ids, and over pipeline stages too
    ids = group_reset_ids(tc, 10, 0) // trials
    for overrides in ([], ["env.train.use_fixed_reset_state_ids=false"], ["rollout.pipeline_stage_num=2"]):
        grpo = load_train_config("metaworld_mt10_grpo_tiny_cpu", overrides, check_paths=False)
        layout = np.concatenate([env.row_tasks(10) for env in train_env_configs(grpo)])
        np.testing.assert_array_equal(layout, ids)
    ppo = load_train_config("metaworld_mt10_ppo_tiny_cpu", [], check_paths=False)  # no grouped starts
    np.testing.assert_array_equal(train_env_configs(ppo)[0].row_tasks(10), np.arange(40) % 10)
    # 3 groups of 4 for 10 tasks: the first task is drawn, so every task gets its share over iterations
    small = load_train_config(
        "metaworld_mt10_grpo_tiny_cpu",
        ["env.train.num_envs=12", "env.train.envs_per_worker=6"],
        check_paths=False,
    )
    counts = np.zeros(10, dtype=int)
    for epoch in range(200):
        tasks = group_reset_ids(small, 10, epoch).reshape(3, 4)[:, 0] // trials
        assert len(set(tasks.tolist())) == 3 and (np.diff(tasks) % 10 == 1).all()  # consecutive tasks in turn
        counts += np.bincount(tasks, minlength=10)
    assert counts.min() > 0.6 * counts.mean()


def test_single_task_group_starts_are_the_plain_draw() -> None:
    tc = load_train_config("metaworld_grpo_tiny_cpu", [], check_paths=False)
    g = tc.algorithm.group_size
    rng = np.random.default_rng(stream_seed(tc.runner.seed, seeds.GROUP_STARTS, 3))
    expected = np.repeat(
        rng.integers(0, tc.env_train.num_trials_per_task, size=tc.env_train.num_envs // g), g
    )
    np.testing.assert_array_equal(group_reset_ids(tc, 1, 3), expected)


def test_fixed_reset_groups_share_task_and_trial_on_mt10() -> None:
    """PPO's starts with `env.train.use_fixed_reset_state_ids`: the rows of a group share one start, task included,
    and the 10 groups take the 10 tasks in turn, as the env's own draw does (`EnvConfig.row_tasks`); without it
    every row keeps its task (row % 10) and draws its own trial."""
    fixed = load_train_config(
        "metaworld_mt10_ppo_tiny_cpu",
        ["env.train.use_fixed_reset_state_ids=true", "algorithm.group_size=4"],
        check_paths=False,
    )
    trials = fixed.env_train.num_trials_per_task
    groups = train_reset_ids(fixed, len(MT10_TASKS), 2).reshape(-1, 4)
    assert (groups == groups[:, :1]).all()
    # every task gets one group (not the tasks of rows 0, 4, 8, ...: the even tasks only)
    assert (groups[:, 0] // trials).tolist() == list(range(10))
    assert (groups[:, 0] // trials).tolist() == fixed.env_train.row_tasks(10)[::4].tolist()
    plain = load_train_config("metaworld_mt10_ppo_tiny_cpu", [], check_paths=False)
    ids = train_reset_ids(plain, len(MT10_TASKS), 2)
    assert (ids // trials).tolist() == [b % 10 for b in range(40)] and len(set((ids % trials).tolist())) > 30


def test_eval_metrics_and_tables_of_a_held_out_mt10_evaluation() -> None:
    ids = held_out_reset_ids(30, num_tasks=10, trials_per_task=60000, trial_offset=50000)
    names = episode_tasks(ids, MT10_TASKS, 60000)
    assert names == [MT10_TASKS[k % 10] for k in range(30)]  # every task x trial pair once
    success = np.array([1.0 if t == "reach-v3" else 0.0 for t in names])
    table = evaluation_table(names, success, task_grouping("metaworld", MT10_TASKS))
    metrics = eval_table_metrics(table, "_greedy")
    assert metrics["eval/easy/success_once_greedy"] == 1 / 7
    assert (
        metrics["eval/medium/success_once_greedy"] == 0.0 and metrics["eval/hard/success_once_greedy"] == 0.0
    )
    assert metrics["eval/avg/success_once_greedy"] == (1 / 7) / 3
    assert metrics["eval/task/reach-v3/success_once_greedy"] == 1.0
    assert len([k for k in metrics if k.startswith("eval/task/")]) == 10 and len(metrics) == 14
    # no grouping (e.g. ManiSkill): per-task metrics only
    assert list(eval_table_metrics(evaluation_table(["t"], [1.0]))) == ["eval/task/t/success_once"]

    text = eval_tables_text({"before_rl": {"sample": table, "greedy": table}, "after_rl": {"sample": table}})
    rows = [line.split("|")[1].strip() for line in text.splitlines()[2:5]]
    assert rows == ["before RL (sample)", "after RL (sample)", "before RL (greedy)"]
    assert eval_tables_text({}) == ""


def test_sft_batches_are_task_balanced() -> None:
    rng = np.random.default_rng(0)
    step_task = rng.permutation(np.repeat([0, 1, 2], [800, 150, 50]))  # experts of very different lengths
    idx = task_balanced_indices(step_task, 30000, torch.Generator().manual_seed(0)).numpy()
    counts = np.bincount(step_task[idx], minlength=3)
    assert (np.abs(counts - 10000) < 400).all(), counts
    assert len(np.unique(idx[step_task[idx] == 2])) == 50  # every step of the short task is drawn
    # one task: the uniform draw over all steps
    one = task_balanced_indices(np.zeros(100, dtype=np.int64), 8, torch.Generator().manual_seed(1))
    assert torch.equal(one, torch.randint(0, 100, (8,), generator=torch.Generator().manual_seed(1)))
