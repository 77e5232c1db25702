"""MetaWorld MT10 end to end on the CPU: one PPO iteration of `metaworld_mt10_ppo_tiny_cpu` with tiny sizes, then
`vla-eval` of the saved policy. The held-out evaluation covers all 10 tasks; its per-task and per-difficulty-group
table is logged, written to summary.json and printed by both commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from train_embodied.testing import PPO_TINY, read_metrics, run_train
from vla_envs.metaworld import MT10_TASKS, difficulty_group

pytestmark = pytest.mark.slow
pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")

# every MT10 task once in one evaluation batch (episode k runs task k % 10), 2 training envs, 1 iteration
MT10_TINY = [
    *PPO_TINY,
    "env.eval.num_envs=10",
    "env.eval.envs_per_worker=10",
    "env.eval.num_episodes=10",
    "env.eval.max_episode_steps=3",
    "runner.max_epochs=1",
    "runner.eval_greedy=false",
]
# MT10 in the reference's difficulty groups: 7 easy, peg-insert-side medium, push and pick-place hard
MT10_GROUPS = {"easy": 7, "medium": 1, "hard": 2}


def _check_table(table: dict, episodes_per_task: int) -> None:
    assert list(table["tasks"]) == sorted(
        MT10_TASKS, key=lambda t: list(MT10_GROUPS).index(difficulty_group(t))
    )
    for task, row in table["tasks"].items():
        assert row["group"] == difficulty_group(task) and row["num_episodes"] == episodes_per_task
        assert 0.0 <= row["success_once"] <= 1.0
    assert {g: row["num_tasks"] for g, row in table["groups"].items()} == MT10_GROUPS
    assert [row["label"] for row in table["groups"].values()] == ["Easy", "Medium", "Hard"]
    assert table["balanced"] and table["num_episodes"] == 10 * episodes_per_task


def test_mt10_iteration_reports_every_task_and_group(tmp_path: Path, capsys) -> None:
    log_dir = tmp_path / "train"
    summary = run_train("metaworld_mt10_ppo_tiny_cpu", MT10_TINY, log_dir)
    out = capsys.readouterr().out
    assert summary["epochs"] == 1 and summary["env_steps"] > 0
    tables = summary["eval_tables"]
    assert set(tables) == {"before_rl", "after_rl"} and all(set(t) == {"sample"} for t in tables.values())
    for by_mode in tables.values():
        _check_table(by_mode["sample"], 1)
    after = tables["after_rl"]["sample"]
    # the table's overall success is the logged eval/success_once (one episode per task: the same mean)
    assert after["all_tasks"] == pytest.approx(summary["success_after_rl"])
    rows = read_metrics(log_dir)
    final = [r for r in rows if "eval/success_once" in r][-1]
    for group in MT10_GROUPS:
        assert final[f"eval/{group}/success_once"] == pytest.approx(after["groups"][group]["success_once"])
    for task in MT10_TASKS:
        assert final[f"eval/task/{task}/success_once"] == pytest.approx(after["tasks"][task]["success_once"])
    assert final["eval/avg/success_once"] == pytest.approx(after["avg"])
    # printed at the end: the group table (before / after rows) and the per-task table
    assert "| success (%)" in out and "Easy (7)" in out and "Medium (1)" in out and "Hard (2)" in out
    assert "before RL (sample)" in out and "after RL (sample)" in out
    assert all(f"| {task}" in out for task in MT10_TASKS)

    # vla-eval of the saved policy prints the same kind of table and writes it to its summary
    from train_embodied.cli import eval_main

    eval_dir = tmp_path / "eval"
    assert (
        eval_main(
            [
                "metaworld_mt10_ppo_tiny_cpu",
                *MT10_TINY,
                f"actor.model.model_path={summary['policy_dir']}",
                f"runner.logger.log_dir={eval_dir}",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    evaluated = json.loads((eval_dir / "summary.json").read_text())["eval_tables"]
    assert set(evaluated) == {"eval"}
    _check_table(evaluated["eval"]["sample"], 1)
    # same policy, same held-out starts, same sampling seed: the after-RL numbers again
    assert evaluated["eval"]["sample"]["tasks"] == after["tasks"]
    assert "eval (sample)" in out and "Easy (7)" in out and all(f"| {task}" in out for task in MT10_TASKS)
