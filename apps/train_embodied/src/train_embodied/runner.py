"""The embodied RL loop, top to bottom: rollout -> advantages -> update -> log (CleanRL style).

    vla-train metaworld_ppo_tiny_cpu actor.model.model_path=<sft folder>

Each epoch: sync weights actor -> rollout, reset the training envs from seeded start states, collect
`max_steps_per_rollout_epoch` env steps per env, compute GAE or GRPO advantages, run `update_epoch` passes
of PPO-clip, log `train/*`, `rollout/*`, `env/*`, `time/*`. Held-out evaluations (sampled and greedy)
before and after training go to `eval/*` and to `summary.json` in the run folder.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from train_embodied import seeds
from train_embodied.checkpointing import (
    drop_metrics_after,
    load_run_checkpoint,
    resume_checkpoint,
    save_run_checkpoint,
)
from train_embodied.config.build import TrainConfig
from train_embodied.evaluation import episode_tasks, eval_table_metrics, evaluate, held_out_reset_ids
from train_embodied.metrics import make_logger, rollout_episode_metrics
from train_embodied.numerics import SKIPPED_MINIBATCHES, SKIPPED_UPDATE, SkippedUpdates
from train_embodied.rollout import RolloutBatch, collect_rollout, concat_rollouts
from train_embodied.run_workers import RunWorkers
from train_embodied.seeds import stream_seed
from train_embodied.trajectories import rollout_rows, rollout_shard
from train_embodied.update import lr_decay_scale
from vla_algos import get_advantage_estimator, get_policy_loss
from vla_envs import TaskGrouping, evaluation_table, format_evaluation_tables, reset_state_ids
from vla_infra import StepTimer


def set_torch_threads(num_threads: int) -> None:
    """Intra-op threads (`runner.torch_num_threads`; 0 keeps torch's default). On a 2-core machine shared
    with simulator processes one thread is about 10x faster than two for the tiny model."""
    if num_threads > 0:
        torch.set_num_threads(num_threads)


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (the per-epoch streams are re-seeded from it as well)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def env_metrics(batch: RolloutBatch) -> dict[str, float]:
    """`env/*` from the episodes that finished during the rollout."""
    ep = batch.episodes
    n = len(ep["success_once"])
    if n == 0:
        return {"env/num_trajectories": 0.0}
    return {
        "env/success_once": float(ep["success_once"].mean()),
        "env/return": float(ep["return"].mean()),
        "env/episode_len": float(ep["episode_len"].mean()),
        "env/reward": float((ep["return"] / np.maximum(ep["episode_len"], 1)).mean()),
        "env/num_trajectories": float(n),
    }


def env_fault_metrics(w: RunWorkers) -> dict[str, float]:
    """`env/worker_restarts`, `env/lost_episodes` (episodes in flight on a crashed simulator, ended as truncated)
    and `env/restart_time_s`, summed over every env worker of the run (training stages and evaluation) so far."""
    totals = {"worker_restarts": 0.0, "lost_episodes": 0.0, "restart_time_s": 0.0}
    for group in [*w.env_train, w.env_eval]:
        for stats in group.fault_stats():
            for key in totals:
                totals[key] += float(stats.get(key, 0.0))
    return {f"env/{key}": value for key, value in totals.items()}


def group_reset_ids(tc: TrainConfig, num_tasks: int, *key: int) -> np.ndarray:
    """Reset ids [num_envs] for a grouped-start estimator (GRPO): each consecutive group of `group_size` envs
    shares one start, so a group is always one task. With several tasks the groups take the tasks in turn, each at
    a random trial: group k runs task (first + k) % num_tasks. When the groups are a multiple of the tasks, first
    is 0 and every env row keeps its task across iterations (its simulator stays built); otherwise first is drawn
    per iteration, so every task gets the same share of groups over the run."""
    g = tc.algorithm.group_size
    trials_per_task = tc.env_train.num_trials_per_task
    num_groups = tc.env_train.num_envs // g
    rng = np.random.default_rng(stream_seed(tc.runner.seed, seeds.GROUP_STARTS, *key))
    trials = rng.integers(0, trials_per_task, size=num_groups)
    if num_tasks > 1:  # one task: the draw above is the whole start, as it always was
        first = int(rng.integers(0, num_tasks)) if num_groups % num_tasks else 0
        tasks = (first + np.arange(num_groups)) % num_tasks
        trials = reset_state_ids(tasks, trials, trials_per_task)
    return np.repeat(trials, g)


def train_reset_ids(tc: TrainConfig, num_tasks: int, *key: int) -> np.ndarray:
    """Reset ids [num_envs] of a rollout without grouped starts: env row b keeps its task (`EnvConfig.row_tasks`:
    b % num_tasks, as the env assigns it) and draws a trial from one generator for the whole batch, so a row's
    start does not depend on how the rows are split over env ranks and pipeline stages. With
    `env.train.use_fixed_reset_state_ids` the rows of a group of `env.train.group_size` share one start, and the
    groups take the tasks in turn (group k runs task k % num_tasks), as the env draws them."""
    env = tc.env_train
    rng = np.random.default_rng(stream_seed(tc.runner.seed, seeds.TRAIN_RESET, *key))
    trials = rng.integers(0, env.num_trials_per_task, size=env.num_envs)
    ids = reset_state_ids(env.replace(first_row=0).row_tasks(num_tasks), trials, env.num_trials_per_task)
    if env.use_fixed_reset_state_ids:
        ids = np.repeat(ids[:: env.group_size], env.group_size)
    return ids


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
    # rollout.do_sample=false (the reference's key, allowed in an evaluation-only run) means greedy decisions
    sample = tc.rollout.eval_do_sample and tc.rollout.do_sample
    modes = ["sample" if sample else "greedy"]
    if tc.runner.eval_greedy and modes[0] != "greedy":
        modes.append("greedy")
    out: dict[str, float] = {}
    w.env_eval.set_iteration(iteration)
    for mode in modes:
        # the same eval sampling noise for every checkpoint
        w.rollout.seed(stream_seed(tc.runner.seed, seeds.EVAL_SAMPLING))
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
        for k, v in res.items():
            out[f"eval/{k}{suffix}"] = v
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
    w.rollout.offload()  # rollout.enable_offload (else a no-op)
    w.env_eval.offload()  # env.eval.enable_offload: stop the simulators until the next evaluation (else a no-op)
    return out


def _collect(
    tc: TrainConfig, w: RunWorkers, estimator: Any, loss: Any, epoch: int, r: int, num_decisions: int
) -> RolloutBatch:
    """Rollout `r` of iteration `epoch` (of `algorithm.rollout_epoch`): envs start from start states seeded by
    (seed, epoch[, r]), so resume replays exactly; its rows are r * num_envs + row. The rollout ranks keep the
    model side of its decisions for the actor ranks; this returns the env side."""
    runner, algo = tc.runner, tc.algorithm
    key = (epoch,) if r == 0 else (epoch, r)  # rollout 0 draws what a single rollout draws
    w.rollout.seed(stream_seed(runner.seed, seeds.ROLLOUT_SAMPLING, *key))
    stages = len(w.env_train)
    if estimator.grouped_starts:
        ids = group_reset_ids(tc, w.train_spec["num_tasks"], *key)
        resets = [{"reset_state_ids": part} for part in np.split(ids, stages)]
    else:
        # start states drawn for the whole batch, each stage and env rank taking its rows' (the same whatever the
        # split); the seed re-seeds each rank's draws of later episodes (autoreset) so resume replays them
        ids = train_reset_ids(tc, w.train_spec["num_tasks"], *key)
        resets = [
            {"seed": stream_seed(runner.seed, seeds.TRAIN_RESET, *key, s), "reset_state_ids": part}
            for s, part in enumerate(np.split(ids, stages))
        ]
    return collect_rollout(
        w.env_train,
        w.rollout,
        num_decisions=num_decisions,
        reset_kwargs=resets,
        bootstrap_truncation=loss.uses_critic,
        stop_when_all_done=estimator.grouped_starts,
        progress=runner.progress_bar,
        desc=f"rollout {epoch + 1}/{runner.max_epochs}"
        + (f" ({r + 1}/{algo.rollout_epoch})" if algo.rollout_epoch > 1 else ""),
        weight_version=w.weight_version,
        record_rows_from=r * tc.env_train.num_envs,
    )


def _sync_weights(w: RunWorkers, state: dict[str, Any]) -> None:
    """Give the rollout the actor's current weights under the next version number (every sync is a new
    version: an evaluation after an update must not run newer weights under an older number)."""
    state["version"] += 1
    w.sync_weights(state["version"])


def run(tc: TrainConfig) -> dict[str, Any]:
    """Train (or only evaluate) as the config says; returns the summary written to `summary.json`."""
    wall0 = time.time()
    log_dir = Path(tc.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "config.json").write_text(json.dumps(tc.raw, indent=2, default=str))
    set_torch_threads(tc.runner.torch_num_threads)
    seed_everything(tc.runner.seed)
    resume_from = None if tc.runner.only_eval else resume_checkpoint(tc.runner.resume_dir, log_dir)
    if resume_from is not None and resume_from.parent.parent.resolve() == log_dir.resolve():
        drop_metrics_after(log_dir, int(resume_from.name.removeprefix("global_step_")))  # logged again below
    elif resume_from is None and tc.runner.resume_dir and not tc.runner.only_eval:
        # `auto` restarting a run that saved nothing: it logs everything again
        drop_metrics_after(log_dir, -1)
    logger = make_logger(tc, log_dir)
    algo, runner, optim = tc.algorithm, tc.runner, tc.actor.optim
    estimator, loss = get_advantage_estimator(algo.adv_type), get_policy_loss(algo.loss_type)
    summary: dict[str, Any] = {
        "config": runner.logger.experiment_name,
        "algorithm": algo.adv_type,
        "seed": runner.seed,
        "log_dir": str(log_dir),
    }
    state: dict[str, Any] = {
        "epoch": 0,
        "env_steps": 0,
        "version": 0,
        "history": [],
        "before": {},
        "eval_tables": {},  # when ("before_rl", "after_rl", "eval") -> decoding mode -> evaluation_table
    }

    with RunWorkers(tc, need_train=not runner.only_eval, pid_file=log_dir / "worker_pids.json") as w:
        print(f"[setup] {tc.cluster.backend} workers ready in {time.time() - wall0:.1f}s; log dir {log_dir}")
        summary["backend"] = tc.cluster.backend
        summary["worker_pids"] = w.worker_pids()
        if runner.only_eval:
            result = run_eval(tc, w, "eval", state["eval_tables"].setdefault("eval", {}))
            logger.log(result, step=0)
            summary.update(_eval_summary(result, "eval"))
            return _finish(summary, logger, log_dir, wall0, tc, state)

        assert w.actor is not None
        if resume_from is not None:
            state = load_run_checkpoint(resume_from, w.actor)
            print(f"[resume] from {resume_from} at epoch {state['epoch']}")
        elif runner.resume_dir:  # `auto` with nothing saved yet
            print(
                f"[resume] runner.resume_dir={runner.resume_dir}: no checkpoint in {log_dir}, starting fresh"
            )
        if resume_from is None and runner.eval_before_train:
            _sync_weights(w, state)
            before = run_eval(tc, w, "before RL", state["eval_tables"].setdefault("before_rl", {}))
            logger.log(before, step=0)
            state["before"] = before
        summary.update(_eval_summary(state["before"], "before_rl"))

        num_decisions = tc.train_run.max_steps_per_rollout_epoch // tc.actor.model.num_action_chunks
        if estimator.grouped_starts:  # one episode per env
            num_decisions = min(num_decisions, tc.env_train.max_episode_steps)
        w.actor_rows(rollout_rows(tc, estimator.grouped_starts))  # refuses a split that would cut a group
        skips = SkippedUpdates(runner.max_consecutive_skipped_updates)
        warned_no_groups = False  # the filter-dropped-every-group warning, printed once
        epochs = tqdm(
            range(state["epoch"], runner.max_epochs),
            desc=f"RL ({algo.adv_type})",
            unit="epoch",
            initial=state["epoch"],
            total=runner.max_epochs,
            disable=not runner.progress_bar,
        )
        for epoch in epochs:
            if runner.max_steps > 0 and state.get("global_step", 0) >= runner.max_steps:
                break
            t_epoch = time.perf_counter()
            timer = StepTimer()  # time/<phase> seconds of this iteration
            # ---- 0. weight sync: actor -> rollout
            with timer("sync_weights"):
                if epoch % runner.weight_sync_interval == 0 or epoch == state["epoch"]:
                    _sync_weights(w, state)

            # ---- 1. rollout: envs start from start states seeded by (seed, epoch), so resume replays exactly;
            # `rollout_epoch` rollouts per iteration, side by side as one batch for the update
            with timer("generate_rollouts"):
                w.rollout.set_global_step(epoch)  # schedules over training (pi0's noise annealing) read it
                for group in w.env_train:
                    group.set_iteration(epoch)  # names this iteration's video files
                for _attempt in range(1 + w.max_restarts):
                    restarts = w.rollout.num_restarts
                    w.rollout.clear_trajectories()
                    rollouts = [
                        _collect(tc, w, estimator, loss, epoch, r, num_decisions)
                        for r in range(algo.rollout_epoch)
                    ]
                    if w.rollout.num_restarts == restarts:
                        break
                    # a replaced rollout rank lost the decisions it recorded: collect this iteration again (its env
                    # resets and sampling are seeded, so nothing else changes)
                    print(
                        f"[rollout] epoch {epoch + 1}: a rollout rank was replaced mid-rollout; collecting again"
                    )
                batch = concat_rollouts(rollouts)  # the env side; the rollout ranks hold the model side
                w.rollout.offload()  # rollout.enable_offload: free the device for the update (else a no-op)
                # env.train.enable_offload: stop the simulators until the next rollout
                for group in w.env_train:
                    group.offload()
                state["env_steps"] += batch.env_steps

            # ---- 2. + 3. each actor rank gets its whole env rows (GRPO groups never cut): the rollout ranks hand
            # it the model side directly, the driver its share of the env side; advantages (the `adv_type`
            # estimator of vla_algos) and the `loss_type` update over minibatches run there
            with timer("actor_update"):
                shard = rollout_shard(batch, split_unit=algo.group_size if estimator.grouped_starts else 1)
                w.rollout.hand_over(w.trajectory_channel, w.actor_rows(shard))
                train_policy = epoch >= algo.critic_warmup_epochs  # warm-up: value loss only
                train_metrics, bad_inputs = w.actor.train_on_rollout(
                    shard,
                    w.trajectory_channel,
                    w.rollout.world_size,
                    stream_seed(runner.seed, seeds.UPDATE_SHUFFLE, epoch),
                    train_policy=train_policy,
                    lr_scale=lr_decay_scale(
                        optim.lr_decay_style, epoch, runner.max_epochs, optim.min_lr / optim.lr
                    ),
                )
                why = (
                    "NaN/inf in " + ", ".join(bad_inputs)
                    if bad_inputs
                    else "NaN/inf loss or gradients in every minibatch"
                )
                skipped = train_metrics.get(SKIPPED_MINIBATCHES, 0.0) >= 1.0
                train_metrics[SKIPPED_UPDATE] = float(skipped)
                skips.record(epoch + 1, skipped, why)
                state["global_step"] = int(w.actor.optimizer_steps())
            if train_metrics.get("rollout/kept_group_fraction", 1.0) == 0.0 and not warned_no_groups:
                warned_no_groups = True
                mean_score = train_metrics.get("rollout/scores_mean", float("nan"))
                print(
                    f"[rl] iteration {epoch + 1}: every group's mean score was outside "
                    f"[{algo.rewards_lower_bound}, {algo.rewards_upper_bound}] (mean score {mean_score:.3g}), so the "
                    "policy trained on nothing (algorithm.filter_rewards drops all-fail and all-success groups; with "
                    "adv_type gae a group is the rows of one task). "
                    "Scores on another scale (env reward_mode=dense, reward_coef) need algorithm.rewards_lower_bound "
                    "/ rewards_upper_bound on that scale, or algorithm.filter_rewards=false. Shown once per run."
                )

            # ---- 4. log
            timings = {**timer.metrics(), "time/step": time.perf_counter() - t_epoch}
            metrics = {**train_metrics, **env_metrics(batch), **env_fault_metrics(w), **timings}
            metrics.update(rollout_episode_metrics(batch))  # the reference documents' rollout/env names
            metrics["env/env_steps"] = float(state["env_steps"])
            # dead env / rollout Ray actors replaced so far
            metrics["cluster/actor_restarts"] = float(w.worker_restarts)
            logger.log(metrics, step=epoch + 1)
            state["history"].append(
                {
                    "epoch": epoch + 1,
                    "env_steps": state["env_steps"],
                    **{k: metrics.get(k) for k in _CURVE_KEYS},
                }
            )
            state["epoch"] = epoch + 1
            epochs.set_postfix(
                success=f"{metrics.get('env/success_once', float('nan')):.2f}",
                kl=f"{metrics.get('train/actor/approx_kl', float('nan')):.3f}",
            )
            last = epoch + 1 == runner.max_epochs and runner.eval_after_train  # the after-RL eval covers it
            if runner.val_check_interval > 0 and (epoch + 1) % runner.val_check_interval == 0 and not last:
                _sync_weights(w, state)
                val = run_eval(tc, w, f"epoch {epoch + 1}", iteration=epoch + 1)
                logger.log(val, step=epoch + 1)
                state["history"][-1].update({k: v for k, v in val.items() if k.startswith("eval/success")})
            if runner.save_interval > 0 and (epoch + 1) % runner.save_interval == 0:
                save_run_checkpoint(log_dir, w.actor, state)

        epochs.close()
        # ---- after RL: final checkpoint (model folder loadable by actor.model.model_path) and held-out eval
        ckpt = save_run_checkpoint(log_dir, w.actor, state)
        summary["checkpoint"] = str(ckpt)
        summary["policy_dir"] = w.actor.save_pretrained(str(log_dir / "policy"))  # for actor.model.model_path
        if runner.eval_after_train:
            _sync_weights(w, state)
            after = run_eval(
                tc, w, "after RL", state["eval_tables"].setdefault("after_rl", {}), iteration=state["epoch"]
            )
            logger.log(after, step=state["epoch"])
            if state["history"]:
                state["history"][-1].update({k: v for k, v in after.items() if k.startswith("eval/success")})
            summary.update(_eval_summary(after, "after_rl"))
        summary["worker_restarts"] = w.worker_restarts
        return _finish(summary, logger, log_dir, wall0, tc, state)


_CURVE_KEYS = ("env/success_once", "env/num_trajectories", "train/actor/approx_kl", "train/entropy_loss")


def _eval_summary(result: dict[str, float], when: str) -> dict[str, float]:
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


def _finish(
    summary: dict[str, Any], logger: Any, log_dir: Path, wall0: float, tc: TrainConfig, state: dict[str, Any]
) -> dict[str, Any]:
    summary["env_steps"] = int(state["env_steps"])
    summary["epochs"] = int(state["epoch"])
    summary["wall_seconds"] = round(time.time() - wall0, 1)
    summary["tensorboard_dir"] = str(log_dir / "tensorboard")
    summary["video_dir"] = str(tc.env_eval.video.video_base_dir) if tc.env_eval.video.save_video else None
    summary["history"] = state["history"]
    summary["eval_tables"] = state["eval_tables"]
    logger.close()
    (log_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    table = eval_tables_text(state["eval_tables"])
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
