"""Smoke-test budgets for the trainer (used by the end-to-end tests): real MetaWorld, the tiny OpenVLA-OFT."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# 32 px images, 2 envs in one worker process, 8-decision rollouts, 2 held-out eval episodes of <= 6 decisions.
TINY = [
    "env.train.image_size=32",
    "env.eval.image_size=32",
    "actor.model.image_size=32",
    "env.train.envs_per_worker=2",
    "env.eval.num_envs=2",
    "env.eval.envs_per_worker=2",
    "env.eval.num_episodes=2",
    "env.eval.max_episode_steps=6",
    "actor.micro_batch_size=8",
    "actor.global_batch_size=16",
    "algorithm.update_epoch=2",
    "runner.progress_bar=false",
    "runner.logger.logger_backends=[tensorboard]",
    "env.train.reward_mode=dense",  # a random tiny policy rarely succeeds in 8 steps: dense reward gives gradients
]
PPO_TINY = [*TINY, "env.train.num_envs=2", "env.train.max_steps_per_rollout_epoch=8"]
GRPO_TINY = [
    *TINY,
    "env.train.num_envs=4",
    "env.train.envs_per_worker=4",
    "algorithm.group_size=2",
    "env.train.max_episode_steps=6",
    "algorithm.filter_rewards=false",
]


def run_train(config: str, overrides: list[str], log_dir: Path) -> dict[str, Any]:
    """Run `vla-train` in this process with `runner.logger.log_dir=log_dir`; returns summary.json."""
    from train_embodied.cli import train_main

    assert train_main([config, *overrides, f"runner.logger.log_dir={log_dir}"]) == 0
    return json.loads((log_dir / "summary.json").read_text())


def read_metrics(log_dir: Path) -> list[dict[str, float]]:
    """The rows of metrics.jsonl."""
    return [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
