"""The run's metric logger (vla_infra MetricLogger: `<log_dir>/tensorboard`, `<log_dir>/wandb`, `<log_dir>/swanlab`)
and metrics.jsonl, the env metrics of a training rollout, and the reference documents' metric names logged beside
ours.

The x-axis of every logged row (`step`, tensorboard's `global_step`) is the training iteration: the metrics of
iteration N (1-based) at step N, an evaluation before training at step 0 (`train_embodied.run_state`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from train_embodied.config.train_config import TrainConfig

if TYPE_CHECKING:
    from train_embodied.rollout import RolloutBatch
    from train_embodied.run_workers import RunWorkers

#: Metric names of the reference documents that are the same number as one of ours: logged under both names.
GUIDE_NAMES = {
    "actor/loss": "train/actor/policy_loss",  # the documents: "PPO policy loss"
    "actor/value_loss": "train/critic/value_loss",
    "actor/entropy": "train/entropy_loss",  # the documents: "Policy entropy" (the mean entropy, not its bonus)
    "actor/grad_norm": "train/actor/grad_norm",
    "actor/lr": "train/actor/lr",
    "actor/approx_kl": "train/actor/approx_kl",
    "actor/pg_clipfrac": "train/actor/clip_fraction",
    "actor/value_clip_ratio": "train/critic/value_clip_ratio",
    "rollout/returns_mean": "rollout/reward_mean",  # the documents: "Mean episode return"
}

#: Ours that the documents use for another number: the mean / max / min of the value targets (GAE returns) is
#: logged as `rollout/value_targets_*`, `rollout/returns_mean` is the mean episode return as the documents say.
RENAMED = {f"rollout/returns_{k}": f"rollout/value_targets_{k}" for k in ("mean", "max", "min")}


def with_guide_names(metrics: dict[str, float]) -> dict[str, float]:
    """`metrics` with each reference documents' name of `GUIDE_NAMES` added beside ours (and `RENAMED` applied)."""
    out = {RENAMED.get(k, k): v for k, v in metrics.items()}
    for theirs, ours in GUIDE_NAMES.items():
        if ours in out:
            out[theirs] = out[ours]
    return out


def rollout_episode_metrics(batch: RolloutBatch) -> dict[str, float]:
    """The reference documents' rollout and env metrics of one training rollout:

    - `rollout/reward_mean`, `rollout/reward_std`: mean / std of the return of the episodes that ended in the
      rollout ("average episode reward"; `with_guide_names` logs the mean as `rollout/returns_mean` too);
    - `rollout/episode_length`: their mean length in env steps;
    - `rollout/success_rate`, `env/success_rate`: the fraction of them that succeeded (= `env/success_once`);
    - `env/termination_rate`: the fraction of them that ended by termination (success or failure state), not by
      the step limit (truncation);
    - `env/step_reward`: the mean reward per env step taken in the rollout.
    """
    out: dict[str, float] = {}
    ep = batch.episodes
    if len(ep.get("success_once", ())) > 0:
        returns = np.asarray(ep["return"], dtype=np.float64)
        out["rollout/reward_mean"] = float(returns.mean())
        out["rollout/reward_std"] = float(returns.std())
        out["rollout/episode_length"] = float(np.mean(ep["episode_len"]))
        out["rollout/success_rate"] = out["env/success_rate"] = float(np.mean(ep["success_once"]))
    mask = batch.loss_mask.bool()  # [T, B] decisions taken inside an episode
    if bool(mask.any()):
        terminated = (batch.terminated.bool().any(-1) & mask).sum()
        ended = ((batch.terminated.bool() | batch.truncated.bool()).any(-1) & mask).sum()
        if int(ended) > 0:
            out["env/termination_rate"] = float(terminated) / float(ended)
        steps = mask.sum() * batch.rewards.shape[-1]
        out["env/step_reward"] = float(batch.rewards.sum(-1)[mask].sum()) / float(steps)
    return out


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


class _JsonlLogger:
    """Always-on copy of every logged dict in `<log_dir>/metrics.jsonl` (easy to plot and to test)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = path.open("a")

    def log(self, metrics: dict[str, float], step: int) -> None:
        try:
            self.file.write(json.dumps({"step": step, **{k: float(v) for k, v in metrics.items()}}) + "\n")
            self.file.flush()
        except OSError as exc:  # a full disk: the error names the file
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None

    def close(self) -> None:
        self.file.close()


class RunLogger:
    """Fan-out to the vla_infra MetricLogger (tensorboard / console / wandb) and metrics.jsonl."""

    def __init__(self, tc: TrainConfig, log_dir: Path) -> None:
        from vla_infra import MetricLogger

        wandb = tc.trainer.logger.wandb  # trainer.logger.wandb: the wandb run's own names, when given
        project, experiment = tc.runner.logger.project_name, tc.runner.logger.experiment_name
        self.backend = MetricLogger(
            backends=list(tc.runner.logger.logger_backends),
            log_dir=str(log_dir),  # the backends add their folder: <log_dir>/tensorboard, <log_dir>/wandb
            project_name=project,
            experiment_name=experiment,
            config=tc.raw,
            backend_names={"wandb": (wandb.project_name or project, wandb.experiment_name or experiment)},
        )
        self.jsonl = _JsonlLogger(log_dir / "metrics.jsonl")

    def log(self, metrics: dict[str, float], step: int) -> None:
        clean = with_guide_names({k: float(v) for k, v in metrics.items() if v is not None})
        self.backend.log(clean, step=step)
        self.jsonl.log(clean, step)

    def close(self) -> None:
        self.backend.close()
        self.jsonl.close()


def make_logger(tc: TrainConfig, log_dir: Path) -> RunLogger:
    """The run's logger (`runner.logger.logger_backends`, tensorboard by default) + metrics.jsonl."""
    return RunLogger(tc, log_dir)
