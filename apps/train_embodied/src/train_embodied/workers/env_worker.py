"""The env worker: one rank's share of a batched env (simulators in subprocesses)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from train_embodied.seeds import rank_seed
from vla_envs import EnvConfig, StepResult, empty_episode_metrics, make_env, task_grouping
from vla_infra import OffloadableEnv, Worker, offload_env, register, reload_env


class EnvWorker(Worker):
    """Owns one `BatchedEnv` with `env_cfg.num_envs // world_size` rows (simulators in subprocesses).

    Args:
        env_cfg: The env config of the whole group (`num_envs` = rows across all ranks).
        enable_offload: `env.<split>.enable_offload`: the simulators are resident only inside a phase. They are
            stopped once built (after `spec` is read) and by `offload()` at the end of each rollout or evaluation
            (their processes and memory go away while the actor trains), and every `reset` builds them again first.
            Each rollout and evaluation starts with a `reset` to start states that depend only on their
            reset_state_ids (the env keeps its start-state generator across the offload), so the episodes are
            the same as with resident simulators.
    """

    def __init__(self, env_cfg: EnvConfig, enable_offload: bool = False) -> None:
        rows = env_cfg.num_envs // self.world_size
        # video files `<split>_rank<r>_iter<i>_env<row>_ep<n>.mp4`: rows are this rank's, so the rank keeps names
        # apart; the runner sets the iteration (`set_iteration`)
        self._video_tag = f"{env_cfg.extra.get('video_tag', 'train')}_rank{self.rank}"
        tag = f"{self._video_tag}_iter0"
        cfg = env_cfg.replace(
            num_envs=rows,
            first_row=env_cfg.first_row + self.rank * rows,
            seed=rank_seed(env_cfg.seed, self.rank),
            extra={**env_cfg.extra, "video_tag": tag},
        )
        self.env = make_env(cfg)
        self.env_cfg = cfg
        self.enable_offload = enable_offload
        if enable_offload:
            if not isinstance(self.env, OffloadableEnv):
                self.env.close()
                raise ValueError(
                    f"enable_offload=True is not supported with env_type={cfg.env_type!r}: its env "
                    f"({type(self.env).__name__}) has no offload() / onload()"
                )
            offload_env(self.env)  # resident only inside a rollout or evaluation phase
        self._obs: dict[str, Any] | None = None  # the observation the next step acts on
        self._boundary_pending = False  # a replacement of a dead worker: report the lost episodes first
        self._lost_episodes = 0  # episodes that were in flight on a dead worker process

    @register("one_to_all", collect="first")
    def spec(self) -> dict[str, Any]:
        """Action dimension and range, number of tasks and of reset states, the task names (reset_state_id =
        task index * num_trials_per_task + trial) and the grouping of the reference result table."""
        tasks = [str(t) for t in getattr(self.env, "tasks", [])] or [str(self.env_cfg.task)]
        return {
            "action_dim": int(self.env.action_dim),
            "action_low": np.asarray(self.env.action_low),
            "action_high": np.asarray(self.env.action_high),
            "num_tasks": int(self.env.num_tasks),
            "num_reset_states": int(self.env.num_reset_states),
            "tasks": tasks,
            "task_grouping": task_grouping(self.env_cfg.env_type, tasks).as_dict(),
        }

    @register("one_to_all", collect="none", replay=True)
    def set_iteration(self, iteration: int) -> None:
        """The training iteration the next episodes belong to: it names their video files."""
        self.env.set_video_tag(f"{self._video_tag}_iter{int(iteration)}")

    @register("split", replay=True)
    def reset(self, reset_state_ids: np.ndarray | None = None, seed: int | None = None) -> dict[str, Any]:
        """Reset this rank's rows: `reset_state_ids` int [B] (split across ranks) or a seeded draw."""
        seed = None if seed is None else rank_seed(seed, self.rank)
        if self.enable_offload:
            reload_env(self.env)  # rebuild the simulators stopped by offload()
        self._obs = self.env.reset(seed=seed, reset_state_ids=reset_state_ids)
        self._boundary_pending = False  # new episodes: nothing in flight is lost
        return self._obs

    def recover(self) -> None:
        """This worker replaces one whose process died (its group replayed the last `reset`): the episodes that
        were in flight there are gone, so the next `chunk_step` reports them as ended instead of stepping."""
        self._boundary_pending = True

    @register("split")
    def chunk_step(self, actions: np.ndarray) -> StepResult:
        """Step actions [B, C, A] (split across ranks); the env's `vla_envs.StepResult` without its `infos` (the run
        reads the simulators' fault counters from `fault_stats`).

        `lost` bool [B] marks rows whose episode was lost with a dead process, one rule for both kinds: a simulator
        subprocess of this rank (the env restarts it and the row starts again from its reset) or this worker's own
        process: on a replacement's first step every row ends as truncated at chunk position 0 (no reward;
        `final_obs` is the replacement's start observation, as the last one died with the process) and starts again
        from the last reset. Those episodes are counted in `fault_stats()["lost_episodes"]`, not in the episode
        metrics."""
        if self._boundary_pending:
            return self._lost_boundary(int(actions.shape[1]))
        res = self.env.chunk_step(actions)
        self._obs = res.obs
        return dataclasses.replace(res, infos={})

    def _lost_boundary(self, chunk: int) -> StepResult:
        assert self._obs is not None, "a replaced env worker steps only after a replayed reset"
        self._boundary_pending = False
        n = len(self._obs["task_descriptions"])
        self._lost_episodes += n
        truncated = np.zeros((n, chunk), dtype=bool)
        truncated[:, 0] = True
        return StepResult(
            obs=self._obs,
            rewards=np.zeros((n, chunk), dtype=np.float32),
            terminated=np.zeros((n, chunk), dtype=bool),
            truncated=truncated,
            final_obs=self._obs,
            final_mask=np.ones(n, dtype=bool),
            episode_metrics=empty_episode_metrics(n),
            lost=np.ones(n, dtype=bool),
        )

    @register("one_to_all", collect="list")
    def fault_stats(self) -> dict[str, float]:
        """This rank's simulator restarts, episodes lost to crashes (of a simulator or of this worker's previous
        process) and restart seconds so far (counters of a dead worker process died with it)."""
        stats = dict(self.env.fault_stats())
        stats["lost_episodes"] = stats.get("lost_episodes", 0.0) + float(self._lost_episodes)
        return stats

    @register("one_to_all", collect="none")
    def offload(self) -> None:
        """End of a rollout or evaluation phase: stop the simulators until the next `reset` (no-op unless
        enable_offload). The episodes in flight end; the next phase starts with a `reset` anyway."""
        if self.enable_offload:
            offload_env(self.env)

    @register("one_to_all", collect="list")
    def simulator_pids(self) -> list[int]:
        """Process ids of this rank's simulators (empty while offloaded)."""
        pids = getattr(self.env, "simulator_pids", None)
        return list(pids()) if callable(pids) else []

    def abort(self) -> None:
        """A call on this worker never returned (a stopped simulator on the local backend): kill its simulators
        from the driver's thread, so that nothing of the run is left running."""
        abort = getattr(self.env, "abort", None)
        if callable(abort):
            abort()

    @register("one_to_all", collect="none", restart=False)
    def close(self) -> None:
        """Stop the simulators."""
        self.env.close()
