"""A held-out evaluation of the run's current policy (`run_eval`), its lines in the run summary and its tables as
text."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from train_embodied import seeds
from train_embodied.config.build import TrainConfig
from train_embodied.evaluation import episode_tasks, eval_table_metrics, evaluate, held_out_reset_ids
from train_embodied.run_workers import RunWorkers
from train_embodied.seeds import stream_seed
from vla_envs import TaskGrouping, evaluation_table, format_evaluation_tables
from vla_infra import phase


def run_eval(
    tc: TrainConfig, w: RunWorkers, tag: str, tables: dict[str, Any] | None = None, *, iteration: int = 0
) -> dict[str, float]:
    """Held-out evaluation with sampled (the rollout setting) and, if asked, greedy decoding, of the policy after
    `iteration` training iterations (which names the evaluation's video files).

    Besides the means (`eval/success_once`, ...) it logs the reference table's per-group and per-task success
    (`eval/<group>/success_once`, `eval/task/<task>/success_once`); the tables themselves go to `tables[mode]`
    (`vla_envs.evaluation.evaluation_table` results) when given."""
    # env.eval.rollout_epoch: the held-out episodes that many times over (the same starts; new sampling noise)
    ids = np.tile(
        held_out_reset_ids(
            tc.eval_run.num_episodes,
            num_tasks=w.env_spec["num_tasks"],
            trials_per_task=tc.env_eval.num_trials_per_task,
            trial_offset=tc.eval_run.trial_offset,
        ),
        tc.eval_run.eval_repeats,
    )
    out: dict[str, float] = {}
    with phase("evaluation"):  # names a worker that fails meanwhile
        w.env_eval.set_iteration(iteration)
        for mode in eval_modes(tc):
            out.update(_eval_mode(tc, w, tag, mode, ids, tables))
        w.rollout.offload()  # rollout.enable_offload (else a no-op)
        w.env_eval.offload()  # env.eval.enable_offload: stop the simulators until the next evaluation
    return out


def eval_modes(tc: TrainConfig) -> list[str]:
    """The decoding modes an evaluation runs: sampled (the rollout setting) first, then greedy if asked."""
    # rollout.do_sample=false (the reference's key, allowed in an evaluation-only run) means greedy decisions
    sample = tc.rollout.eval_do_sample and tc.rollout.do_sample
    modes = ["sample" if sample else "greedy"]
    if tc.runner.eval_greedy and modes[0] != "greedy":
        modes.append("greedy")
    return modes


def _eval_mode(
    tc: TrainConfig, w: RunWorkers, tag: str, mode: str, ids: np.ndarray, tables: dict[str, Any] | None
) -> dict[str, float]:
    """One decoding mode's evaluation of the held-out starts `ids`: its `eval/*` metrics (greedy: `_greedy`)."""
    w.rollout.seed(stream_seed(tc.runner.seed, seeds.EVAL_SAMPLING))  # the same noise for every checkpoint
    t0 = time.time()
    res, episodes = evaluate(
        w.env_eval,
        w.rollout,
        num_envs=tc.env_eval.num_envs,
        num_episodes=len(ids),
        reset_ids=ids,
        max_decisions=tc.env_eval.max_episode_steps,
        mode=mode,
        progress=tc.runner.progress_bar,
        weight_version=w.weight_version,
    )
    suffix = "" if mode == "sample" else "_greedy"
    out = {f"eval/{k}{suffix}": v for k, v in res.items()}
    spec = w.env_spec
    names = episode_tasks(episodes["reset_state_ids"], spec["tasks"], tc.env_eval.num_trials_per_task)
    table = evaluation_table(names, episodes["success_once"], TaskGrouping(**spec["task_grouping"]))
    out.update(eval_table_metrics(table, suffix))
    if tables is not None:
        tables[mode] = table
    out[f"time/eval{suffix}"] = time.time() - t0
    print(
        f"[{tag}] eval {mode}: success {res['success_once']:.2f} over {int(res['num_trajectories'])} episodes"
    )
    return out


def eval_summary(result: dict[str, float], when: str) -> dict[str, float]:
    """The summary's `success_<when>` (and `success_<when>_greedy`) of an evaluation's metrics."""
    out = {}
    if "eval/success_once" in result:
        out[f"success_{when}"] = result["eval/success_once"]
    if "eval/success_once_greedy" in result:
        out[f"success_{when}_greedy"] = result["eval/success_once_greedy"]
    return out


_WHEN_TITLES = {"before_rl": "before RL", "after_rl": "after RL", "eval": "eval"}


def eval_tables_text(eval_tables: dict[str, dict[str, Any]]) -> str:
    """The run's evaluation tables (`summary.json`'s `eval_tables`: when -> decoding mode -> table) as text: one
    row per evaluation and decoding mode (sampled first), as `vla_envs.evaluation.format_evaluation_tables`."""
    rows = {
        f"{_WHEN_TITLES.get(when, when)} ({mode})": by_mode[mode]
        for mode in ("sample", "greedy")
        for when, by_mode in eval_tables.items()
        if mode in by_mode
    }
    return format_evaluation_tables(rows)
