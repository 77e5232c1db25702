"""The start states of training rollouts: which seeded start (task and trial) each env row resets to.

Every draw is seeded by (runner.seed, a stream, the iteration[, the rollout of the iteration]), so a resumed run
replays exactly the starts of an uninterrupted one, whatever the split of the rows over env ranks and pipeline
stages.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from train_embodied import seeds
from train_embodied.config.train_config import TrainConfig
from train_embodied.seeds import stream_seed
from vla_envs import reset_state_ids


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
    if num_tasks > 1:  # one task: the trial drawn above is the whole start
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


def stage_resets(
    tc: TrainConfig, *, grouped_starts: bool, num_tasks: int, stages: int, key: tuple[int, ...]
) -> list[dict[str, Any]]:
    """The reset arguments of each pipeline stage's env group for the rollout `key` ((iteration,) or (iteration,
    r)): the stage's rows of the whole batch's start draw. Without grouped starts each stage also gets a seed,
    which re-seeds its ranks' draws of later episodes (autoreset) so that resume replays them."""
    if grouped_starts:
        ids = group_reset_ids(tc, num_tasks, *key)
        return [{"reset_state_ids": part} for part in np.split(ids, stages)]
    ids = train_reset_ids(tc, num_tasks, *key)
    return [
        {"seed": stream_seed(tc.runner.seed, seeds.TRAIN_RESET, *key, s), "reset_state_ids": part}
        for s, part in enumerate(np.split(ids, stages))
    ]
