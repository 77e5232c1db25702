"""Held-out evaluation of the run's current policy: every episode starts from a distinct held-out (task, trial) start
state.

Episode k runs task `k % num_tasks` at trial `trial_offset + k // num_tasks`; trial ids at or above
`trial_offset` are never used by demos or training (`env.eval.trial_offset`), so the numbers measure
generalisation to unseen starts. Envs run with auto_reset off, one episode per env per batch. `run_eval` evaluates
with sampled (and, if asked, greedy) decisions and logs the reference table's per-group and per-task success;
`eval_summary` and `eval_tables_text` give its lines in the run summary and its tables as text.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from train_embodied import seeds
from train_embodied.config.train_config import TrainConfig
from train_embodied.progress import progress_bar
from train_embodied.run_workers import RunWorkers
from train_embodied.seeds import stream_seed
from vla_envs import (
    TaskGrouping,
    evaluation_table,
    format_evaluation_tables,
    reset_state_ids,
    split_reset_state_ids,
)
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
        weight_version=w.weights.version if w.weights is not None else None,  # None: built from model_path
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


def held_out_reset_ids(
    num_episodes: int, *, num_tasks: int, trials_per_task: int, trial_offset: int
) -> np.ndarray:
    """reset_state_ids int64 [num_episodes] of the held-out starts (id = task * trials_per_task + trial)."""
    k = np.arange(num_episodes)
    trial = trial_offset + k // num_tasks
    if trial.max(initial=0) >= trials_per_task:
        raise ValueError(
            f"env.eval needs num_trials_per_task > {int(trial.max())} for {num_episodes} held-out episodes "
            f"from trial {trial_offset}"
        )
    return reset_state_ids(k % num_tasks, trial, trials_per_task)


def evaluate(
    env: Any,
    rollout: Any,
    *,
    num_envs: int,
    num_episodes: int,
    reset_ids: np.ndarray,
    max_decisions: int,
    mode: str,
    progress: bool | str = False,
    weight_version: int | None = None,
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Run `num_episodes` held-out episodes with decoding `mode` ("sample" or "greedy").

    Returns:
        (success_once, return, episode_len (means), num_trajectories;
         per episode: reset_state_ids int64 [num_episodes], success_once float32 [num_episodes]).
    """
    success, returns, lengths = [], [], []
    bar = progress_bar(progress, total=num_episodes, desc=f"eval ({mode})", leave=False, unit="ep")
    for start in range(0, num_episodes, num_envs):
        ids = reset_ids[start : start + num_envs]
        valid = len(ids)
        ids = np.concatenate([ids, np.repeat(ids[:1], num_envs - valid)])  # pad the last batch
        obs = env.reset(reset_state_ids=ids)
        done = np.zeros(num_envs, dtype=bool)
        metrics = {k: np.zeros(num_envs, dtype=np.float32) for k in ("success_once", "return", "episode_len")}
        for _ in range(max_decisions):
            out = rollout.predict(obs, mode=mode, weight_version=weight_version)
            res = env.chunk_step(out.actions.numpy())
            # a lost episode (dead env worker process) starts again from its held-out start: not counted yet
            rows = np.flatnonzero(np.asarray(res.final_mask) & ~np.asarray(res.lost) & ~done)
            for key in metrics:
                metrics[key][rows] = np.asarray(res.episode_metrics[key])[rows]
            done[rows] = True
            obs = res.obs
            if done[:valid].all():
                break
        success += metrics["success_once"][:valid].tolist()
        returns += metrics["return"][:valid].tolist()
        lengths += metrics["episode_len"][:valid].tolist()
        bar.update(valid)
    bar.close()
    means = {
        "success_once": float(np.mean(success)),
        "return": float(np.mean(returns)),
        "episode_len": float(np.mean(lengths)),
        "num_trajectories": float(len(success)),
    }
    per_episode = {
        "reset_state_ids": np.asarray(reset_ids[:num_episodes], dtype=np.int64),
        "success_once": np.asarray(success, dtype=np.float32),
    }
    return means, per_episode


def episode_tasks(ids: np.ndarray, tasks: list[str], trials_per_task: int) -> list[str]:
    """Task name of each episode of reset-state `ids` (`vla_envs.split_reset_state_ids`)."""
    task_index, _ = split_reset_state_ids(ids, trials_per_task)
    return [tasks[int(i)] for i in task_index]


def eval_table_metrics(table: dict[str, Any], suffix: str = "") -> dict[str, float]:
    """`eval/<group>/success_once`, `eval/task/<task>/success_once` and `eval/avg/success_once` (the mean of the
    groups, the reference MetaWorld table's Avg.) of an `vla_envs.evaluation.evaluation_table` result."""
    out = {f"eval/{g}/success_once{suffix}": row["success_once"] for g, row in table["groups"].items()}
    if table["groups"]:
        out[f"eval/avg/success_once{suffix}"] = table["avg"]
    out.update(
        {f"eval/task/{t}/success_once{suffix}": row["success_once"] for t, row in table["tasks"].items()}
    )
    return out
