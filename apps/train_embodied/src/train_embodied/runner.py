"""The embodied RL loop, top to bottom: rollout -> advantages -> update -> log (CleanRL style).

    vla-train metaworld_ppo_tiny_cpu actor.model.model_path=<sft folder>

`run` sets up, runs `iteration` `runner.num_iterations` times (`runner.max_epochs`, capped by `runner.max_steps`)
over a `RunState`, and finishes. Each iteration: sync weights actor -> rollout, reset the training envs from
seeded start states, collect `max_steps_per_rollout_epoch` env steps per env, compute GAE or GRPO advantages, run
`update_epoch` passes of PPO-clip, log `train/*`, `rollout/*`, `env/*`, `time/*` at step = the iteration's number.
Held-out evaluations (sampled and greedy) before and after training go to `eval/*` and to `summary.json` in the
run folder.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from train_embodied import seeds
from train_embodied.checkpointing import choose_resume, load_run_checkpoint, save_run_checkpoint, should_save
from train_embodied.config.train_config import TrainConfig
from train_embodied.evaluation import eval_summary, eval_tables_text, run_eval
from train_embodied.metrics import (
    RunLogger,
    env_fault_metrics,
    env_metrics,
    make_logger,
    rollout_episode_metrics,
)
from train_embodied.numerics import SKIPPED_MINIBATCHES, SKIPPED_UPDATE, SkippedUpdates, TrainingDiverged
from train_embodied.progress import progress_bar
from train_embodied.rollout import RolloutBatch, collect_rollout, concat_rollouts
from train_embodied.run_folder import write_atomic
from train_embodied.run_state import RunState
from train_embodied.run_workers import RunWorkers
from train_embodied.seeds import stream_seed
from train_embodied.starts import stage_resets
from train_embodied.trajectories import rollout_rows, rollout_shard
from train_embodied.update import lr_decay_scale
from vla_algos import AdvantageEstimator, PolicyLoss, get_advantage_estimator, get_policy_loss
from vla_infra import StepTimer

#: metrics of each iteration kept in the summary's `history` (the learning curves)
_CURVE_KEYS = ("env/success_once", "env/num_trajectories", "train/actor/approx_kl", "train/entropy_loss")


def set_torch_threads(num_threads: int) -> None:
    """Intra-op threads (`runner.torch_num_threads`; 0 keeps torch's default). On a 2-core machine shared
    with simulator processes one thread is about 10x faster than two for the tiny model."""
    if num_threads > 0:
        torch.set_num_threads(num_threads)


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (the per-iteration streams are re-seeded from it as well)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class Trainer:
    """What stays fixed over a training run's iterations: the config, the workers, the logger and the registered
    estimator and loss, with the settings derived from them."""

    tc: TrainConfig
    w: RunWorkers
    logger: RunLogger
    log_dir: Path
    estimator: AdvantageEstimator
    loss: PolicyLoss
    num_decisions: int  # policy decisions per env per rollout
    first_iteration: int  # the iteration this process starts at (after a resume: the checkpoint's)
    skips: SkippedUpdates
    progress: Any  # the iterations' progress bar


def run(tc: TrainConfig) -> dict[str, Any]:
    """Train (or only evaluate) as the config says; returns the summary written to `summary.json`."""
    state = RunState()
    log_dir = Path(tc.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(log_dir / "config.json", json.dumps(tc.raw, indent=2, default=str))
    set_torch_threads(tc.runner.torch_num_threads)
    seed_everything(tc.runner.seed)
    resume_from = None if tc.runner.only_eval else choose_resume(tc.runner.resume_dir, log_dir)
    logger = make_logger(tc, log_dir)
    summary: dict[str, Any] = {
        "config": tc.runner.logger.experiment_name,
        "algorithm": tc.algorithm.adv_type,
        "seed": tc.runner.seed,
        "log_dir": str(log_dir),
    }
    with RunWorkers(tc, need_train=not tc.runner.only_eval, pid_file=log_dir / "worker_pids.json") as w:
        print(
            f"[setup] {tc.cluster.backend} workers ready in {time.time() - state.start_time:.1f}s; log dir {log_dir}"
        )
        summary.update(backend=tc.cluster.backend, worker_pids=w.worker_pids())
        if tc.runner.only_eval:
            result = run_eval(tc, w, "eval", state.eval_tables.setdefault("eval", {}))
            logger.log(result, step=0)
            summary.update(eval_summary(result, "eval"))
            return _finish(summary, logger, log_dir, tc, state)
        state = _start_training(tc, w, logger, log_dir, state, resume_from)
        summary.update(eval_summary(state.before, "before_rl"))
        trainer = _trainer(tc, w, logger, log_dir, state)
        while state.iteration < tc.runner.num_iterations:
            iteration(trainer, state)
        trainer.progress.close()
        summary.update(_after_training(trainer, state))
        return _finish(summary, logger, log_dir, tc, state)


def iteration(t: Trainer, state: RunState) -> None:
    """One training iteration, the (state.iteration + 1)-th: weight sync, rollout, advantages and update (on the
    actor ranks), log, and the val check and checkpoint that fall on it."""
    i = state.iteration  # iterations done before this one: its 0-based index
    t0, timer, runner = time.perf_counter(), StepTimer(), t.tc.runner  # timer: time/<phase> of this iteration
    with timer("sync_weights"):
        if i % runner.weight_sync_interval == 0 or i == t.first_iteration:
            _sync_weights(t.w, state)
    with timer("generate_rollouts"):
        batch = _rollouts(t, i)
        state.env_steps += batch.env_steps
    with timer("actor_update"):
        train_metrics = _update(t, batch, i)
        state.optimizer_steps = int(t.w.actor.optimizer_steps())
    _warn_if_every_group_dropped(t, state, train_metrics)
    state.iteration = i + 1
    timings = {**timer.metrics(), "time/step": time.perf_counter() - t0}
    metrics = {**train_metrics, **env_metrics(batch), **env_fault_metrics(t.w), **timings}
    metrics.update(rollout_episode_metrics(batch))  # the reference documents' rollout/env names
    metrics["env/env_steps"] = float(state.env_steps)
    metrics["train/actor/optimizer_steps"] = float(state.optimizer_steps)
    metrics["cluster/actor_restarts"] = float(t.w.worker_restarts)  # dead env / rollout Ray actors replaced
    t.logger.log(metrics, step=state.iteration)
    state.history.append(
        {
            "iteration": state.iteration,
            "env_steps": state.env_steps,
            **{k: metrics.get(k) for k in _CURVE_KEYS},
        }
    )
    t.progress.update(1)
    t.progress.set_postfix(
        success=f"{metrics.get('env/success_once', float('nan')):.2f}",
        kl=f"{metrics.get('train/actor/approx_kl', float('nan')):.3f}",
    )
    if _val_check_due(runner, state.iteration):
        _sync_weights(t.w, state)
        val = run_eval(t.tc, t.w, f"iteration {state.iteration}", iteration=state.iteration)
        t.logger.log(val, step=state.iteration)
        state.history[-1].update({k: v for k, v in val.items() if k.startswith("eval/success")})
    if should_save(runner.save_interval, state.iteration):
        save_run_checkpoint(t.log_dir, t.w.actor, state)


def _start_training(
    tc: TrainConfig,
    w: RunWorkers,
    logger: RunLogger,
    log_dir: Path,
    state: RunState,
    resume_from: Path | None,
) -> RunState:
    """The state training starts from: the checkpoint's (`resume_from`), or a fresh one after the evaluation
    before training (`runner.eval_before_train`)."""
    assert w.actor is not None
    if resume_from is not None:
        loaded = replace(load_run_checkpoint(resume_from, w.actor), start_time=state.start_time)
        print(f"[resume] from {resume_from} at iteration {loaded.iteration}")
        return loaded
    if tc.runner.resume_dir:  # `auto` with nothing saved yet
        print(
            f"[resume] runner.resume_dir={tc.runner.resume_dir}: no checkpoint in {log_dir}, starting fresh"
        )
    if tc.runner.eval_before_train:
        _sync_weights(w, state)
        state.before = run_eval(tc, w, "before RL", state.eval_tables.setdefault("before_rl", {}))
        logger.log(state.before, step=0)
    return state


def _trainer(tc: TrainConfig, w: RunWorkers, logger: RunLogger, log_dir: Path, state: RunState) -> Trainer:
    """The run's fixed parts; tells the actor ranks which env rows each trains on."""
    algo, runner = tc.algorithm, tc.runner
    estimator, loss = get_advantage_estimator(algo.adv_type), get_policy_loss(algo.loss_type)
    num_decisions = tc.train_run.max_steps_per_rollout_epoch // tc.actor.model.num_action_chunks
    if estimator.grouped_starts:  # one episode per env
        num_decisions = min(num_decisions, tc.env_train.max_episode_steps)
    w.actor_rows(rollout_rows(tc, estimator.grouped_starts))  # refuses a split that would cut a group
    progress = progress_bar(
        runner.progress_bar,
        desc=f"RL ({algo.adv_type})",
        unit="iteration",
        initial=state.iteration,
        total=runner.num_iterations,
    )
    return Trainer(
        tc, w, logger, log_dir, estimator, loss, num_decisions, state.iteration,
        SkippedUpdates(runner.max_consecutive_skipped_updates), progress,
    )  # fmt: skip


def _sync_weights(w: RunWorkers, state: RunState) -> None:
    """Give the rollout the actor's current weights under the next version number (every sync is a new
    version: an evaluation after an update must not run newer weights under an older number)."""
    assert w.weights is not None  # a training run's actor -> rollout weight sync
    state.weight_version += 1
    w.weights.sync(state.weight_version)


def _rollouts(t: Trainer, i: int) -> RolloutBatch:
    """The env side of iteration `i`'s `algorithm.rollout_epoch` rollouts, side by side as one batch (the rollout
    ranks keep the model side for the actor ranks). A rollout rank replaced mid-rollout lost the decisions it
    recorded: the iteration's rollouts are collected again (seeded, so nothing else changes)."""
    t.w.rollout.set_global_step(i)  # schedules over training (pi0's noise annealing) read the iterations done
    for group in t.w.env_train:
        group.set_iteration(i)  # names this iteration's video files
    for _attempt in range(1 + t.w.max_restarts):
        restarts = t.w.rollout.num_restarts
        t.w.rollout.clear_trajectories()
        rollouts = [_collect(t, i, r) for r in range(t.tc.algorithm.rollout_epoch)]
        if t.w.rollout.num_restarts == restarts:
            break
        print(f"[rollout] iteration {i + 1}: a rollout rank was replaced mid-rollout; collecting again")
    t.w.rollout.offload()  # rollout.enable_offload: free the device for the update (else a no-op)
    for group in t.w.env_train:
        group.offload()  # env.train.enable_offload: stop the simulators until the next rollout
    return concat_rollouts(rollouts)


def _collect(t: Trainer, i: int, r: int) -> RolloutBatch:
    """Rollout `r` of iteration `i`: envs start from start states seeded by (seed, i[, r]), so resume replays
    exactly; its rows are r * num_envs + row."""
    runner, algo = t.tc.runner, t.tc.algorithm
    key = (i,) if r == 0 else (i, r)  # rollout 0 draws what a single rollout draws
    t.w.rollout.seed(stream_seed(runner.seed, seeds.ROLLOUT_SAMPLING, *key))
    resets = stage_resets(
        t.tc,
        grouped_starts=t.estimator.grouped_starts,
        num_tasks=t.w.train_spec["num_tasks"],
        stages=len(t.w.env_train),
        key=key,
    )
    return collect_rollout(
        t.w.env_train,
        t.w.rollout,
        num_decisions=t.num_decisions,
        reset_kwargs=resets,
        bootstrap_truncation=t.loss.uses_critic,
        stop_when_all_done=t.estimator.grouped_starts,
        progress=runner.progress_bar,
        desc=f"rollout {i + 1}/{runner.num_iterations}"
        + (f" ({r + 1}/{algo.rollout_epoch})" if algo.rollout_epoch > 1 else ""),
        weight_version=t.w.weights.version if t.w.weights is not None else None,
        record_rows_from=r * t.tc.env_train.num_envs,
    )


def _update(t: Trainer, batch: RolloutBatch, i: int) -> dict[str, float]:
    """Iteration `i`'s update: each actor rank gets its whole env rows (GRPO groups never cut), the model side
    from the rollout ranks and its share of the env side from here; advantages (the `adv_type` estimator of
    vla_algos) and the `loss_type` update over minibatches run there. Returns the update's metrics."""
    algo, optim, runner = t.tc.algorithm, t.tc.actor.optim, t.tc.runner
    shard = rollout_shard(batch, split_unit=algo.group_size if t.estimator.grouped_starts else 1)
    t.w.rollout.hand_over(t.w.trajectory_channel, t.w.actor_rows(shard))
    metrics, bad_inputs, diverged = t.w.actor.train_on_rollout(
        shard,
        t.w.trajectory_channel,
        t.w.rollout.world_size,
        stream_seed(runner.seed, seeds.UPDATE_SHUFFLE, i),
        train_policy=i >= algo.critic_warmup_epochs,  # warm-up: value loss only
        lr_scale=lr_decay_scale(optim.lr_decay_style, i, runner.num_iterations, optim.min_lr / optim.lr),
    )
    if diverged is not None:  # stop before these weights are saved, synced to the rollout or evaluated
        raise TrainingDiverged(
            f"iteration {i + 1}: the weights after the update are unusable: {diverged}; the run stops before "
            "they are saved or sampled with: lower actor.optim.lr (or actor.optim.clip_grad), then resume from the "
            "last complete checkpoint"
        )
    why = (
        "NaN/inf in " + ", ".join(bad_inputs)
        if bad_inputs
        else "NaN/inf loss or gradients in every minibatch"
    )
    skipped = metrics.get(SKIPPED_MINIBATCHES, 0.0) >= 1.0
    metrics[SKIPPED_UPDATE] = float(skipped)
    t.skips.record(i + 1, skipped, why)
    return metrics


def _warn_if_every_group_dropped(t: Trainer, state: RunState, metrics: dict[str, float]) -> None:
    """Once per run: the reward filter dropped every group, so the policy trained on nothing."""
    if metrics.get("rollout/kept_group_fraction", 1.0) != 0.0 or state.warned_no_groups:
        return
    state.warned_no_groups = True
    algo = t.tc.algorithm
    mean_score = metrics.get("rollout/scores_mean", float("nan"))
    print(
        f"[rl] iteration {state.iteration + 1}: every group's mean score was outside "
        f"[{algo.rewards_lower_bound}, {algo.rewards_upper_bound}] (mean score {mean_score:.3g}), so the "
        "policy trained on nothing (algorithm.filter_rewards drops all-fail and all-success groups; with "
        "adv_type gae a group is the rows of one task). "
        "Scores on another scale (env reward_mode=dense, reward_coef) need algorithm.rewards_lower_bound "
        "/ rewards_upper_bound on that scale, or algorithm.filter_rewards=false. Shown once per run."
    )


def _val_check_due(runner: Any, done: int) -> bool:
    """Whether a held-out evaluation follows iteration `done` (`runner.val_check_interval`); not after the last
    one when the evaluation after training covers it."""
    last = done == runner.num_iterations and runner.eval_after_train
    return runner.val_check_interval > 0 and done % runner.val_check_interval == 0 and not last


def _after_training(t: Trainer, state: RunState) -> dict[str, Any]:
    """The final checkpoint, the policy folder (loadable by `actor.model.model_path`) and the evaluation after
    training; returns their summary lines."""
    out: dict[str, Any] = {"checkpoint": str(save_run_checkpoint(t.log_dir, t.w.actor, state))}
    out["policy_dir"] = t.w.actor.save_pretrained(str(t.log_dir / "policy"))
    if t.tc.runner.eval_after_train:
        _sync_weights(t.w, state)
        tables = state.eval_tables.setdefault("after_rl", {})
        after = run_eval(t.tc, t.w, "after RL", tables, iteration=state.iteration)
        t.logger.log(after, step=state.iteration)
        if state.history:
            state.history[-1].update({k: v for k, v in after.items() if k.startswith("eval/success")})
        out.update(eval_summary(after, "after_rl"))
    out["worker_restarts"] = t.w.worker_restarts
    return out


def _finish(
    summary: dict[str, Any], logger: RunLogger, log_dir: Path, tc: TrainConfig, state: RunState
) -> dict[str, Any]:
    """Complete the summary, write `summary.json` and print where everything is."""
    summary["env_steps"] = int(state.env_steps)
    summary["iterations"] = summary["epochs"] = int(state.iteration)  # `epochs`: the reference's max_epochs
    summary["optimizer_steps"] = int(state.optimizer_steps)
    summary["wall_seconds"] = round(time.time() - state.start_time, 1)
    summary["tensorboard_dir"] = str(log_dir / "tensorboard")
    summary["video_dir"] = str(tc.env_eval.video.video_base_dir) if tc.env_eval.video.save_video else None
    summary["history"] = state.history
    summary["eval_tables"] = state.eval_tables
    logger.close()
    write_atomic(log_dir / "summary.json", json.dumps(summary, indent=2))
    table = eval_tables_text(state.eval_tables)
    if table:
        print("[done] held-out success per group and per task (%):\n" + table)
    keys = [k for k in summary if k.startswith("success_")]
    print(
        "[done] " + ", ".join(f"{k}={summary[k]:.2f}" for k in keys) + f"; env_steps={summary['env_steps']}"
    )
    print(f"[done] log dir: {log_dir}\n[done] summary: {log_dir / 'summary.json'}")
    print(f"[done] tensorboard: tensorboard --logdir {summary['tensorboard_dir']}")
    if summary["video_dir"]:
        print(f"[done] videos: {summary['video_dir']}")
    return summary
