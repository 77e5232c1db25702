"""Build the worker groups of a run from `cluster` (placement + backend) and shut them down."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from train_embodied.config.train_config import TrainConfig
from train_embodied.run_folder import write_atomic
from train_embodied.seeds import ENV_STAGE, stream_seed
from train_embodied.workers import ActorWorker, EnvWorker, RolloutWorker
from vla_algos import get_advantage_estimator
from vla_envs import EnvConfig
from vla_infra import (
    WeightSyncCoordinator,
    WorkerGroup,
    WorkerTimeout,
    make_backend,
    phase,
    resolve_placement,
    unit_bounds,
)


def train_env_configs(tc: TrainConfig) -> list[EnvConfig]:
    """The training env of each pipeline stage: its share of `env.train.num_envs`, where its rows sit in the whole
    batch (`first_row`) and its own seed. A grouped-start estimator (GRPO) resets each group of `group_size` rows
    to one start, so one task: the env then lays its rows out in those groups (`use_fixed_reset_state_ids`), and
    each row builds only the simulator of its group's task."""
    stages = tc.rollout.pipeline_stage_num
    per_stage = tc.env_train.num_envs // stages
    grouped = get_advantage_estimator(tc.algorithm.adv_type).grouped_starts
    return [
        tc.env_train.replace(
            num_envs=per_stage,
            first_row=s * per_stage,
            seed=stream_seed(tc.env_train.seed, ENV_STAGE, s),
            use_fixed_reset_state_ids=tc.env_train.use_fixed_reset_state_ids or grouped,
        )
        for s in range(stages)
    ]


class RunWorkers:
    """The env (train: one group per pipeline stage; eval), rollout and actor worker groups of a run.

    Args:
        tc: The run's config.
        need_train: Build the training envs and the actor (False for `only_eval`).
        pid_file: If given, a JSON file of every worker's process id by group (`worker_pids()`), written at start
            and again after a worker was replaced (which process is which, for an operator or a fault test).

    Attributes:
        weights: The actor -> rollout weight sync (`vla_infra.WeightSyncCoordinator`: `sync(version)`, the
            `version` last synced); None without an actor (evaluation only: the rollout loads `model_path`).
    """

    def __init__(self, tc: TrainConfig, *, need_train: bool = True, pid_file: Path | None = None) -> None:
        self.groups: list[WorkerGroup] = []
        self.backend = None
        try:
            with phase("setup"):
                self._start(tc, need_train, pid_file)
        except BaseException:
            self.close()  # the workers started so far (and a Ray instance started here) stop with the failure
            raise

    def _start(self, tc: TrainConfig, need_train: bool, pid_file: Path | None) -> None:
        cluster = tc.cluster
        self.placement = resolve_placement(
            dict(cluster.component_placement),
            num_nodes=cluster.num_nodes,
            num_gpus_per_node=cluster.num_gpus_per_node,
        )
        self.backend_name = cluster.backend
        # the Ray backend joins `cluster.ray_address` (or RAY_ADDRESS), waiting up to cluster.worker_start_timeout_s
        # for its nodes, else starts a private instance on 127.0.0.1 that its shutdown() stops
        ray_kwargs = (
            {"address": cluster.ray_address, "node_wait_s": cluster.worker_start_timeout_s}
            if cluster.backend == "ray"
            else {}
        )
        self.backend = make_backend(
            cluster.backend,
            num_nodes=cluster.num_nodes,
            num_gpus_per_node=cluster.num_gpus_per_node,
            **ray_kwargs,
        )
        # a dead env or rollout Ray actor is replaced (the local backend runs every worker in this process)
        self.max_restarts = cluster.max_worker_restarts if cluster.backend == "ray" else 0
        self.timeout_s = cluster.worker_timeout_s  # every call the driver waits on
        self.start_timeout_s = cluster.worker_start_timeout_s  # a worker's start-up (model, simulators)
        env_pl = self.placement["env"]
        self.env_train: list[WorkerGroup] = []
        if need_train:
            offload = tc.train_run.enable_offload  # env.train.enable_offload
            for s, cfg in enumerate(train_env_configs(tc)):
                self.env_train.append(
                    self._group(
                        EnvWorker,
                        env_pl,
                        f"env_train_{s}",
                        self.max_restarts,
                        env_cfg=cfg,
                        enable_offload=offload,
                    )
                )
        eval_cfg = tc.env_eval.replace(extra={**tc.env_eval.extra, "video_tag": "eval"})
        offload = tc.eval_run.enable_offload  # env.eval.enable_offload
        self.env_eval = self._group(
            EnvWorker, env_pl, "env_eval", self.max_restarts, env_cfg=eval_cfg, enable_offload=offload
        )
        self.env_spec: dict[str, Any] = self.env_eval.spec()
        self.train_spec: dict[str, Any] = self.env_train[0].spec() if self.env_train else self.env_spec
        self.rollout = self._group(
            RolloutWorker,
            self.placement["rollout"],
            "rollout",
            self.max_restarts,
            model=tc.actor.model,
            env_spec=self.env_spec,
            sampling=tc.rollout,
            num_threads=tc.runner.torch_num_threads,
        )
        self.actor: WorkerGroup | None = None
        if need_train:
            # several actor processes: one FSDP2 shard each (validated: Ray backend, fsdp_config.strategy)
            self.actor = self._group(
                ActorWorker,
                self.placement["actor"],
                "actor",
                0,  # the optimizer state and the FSDP group of a dead actor cannot be rebuilt in place
                model=tc.actor.model,
                env_spec=self.env_spec,
                optim=tc.actor.optim,
                algorithm=tc.algorithm,
                micro_batch_size=tc.actor.micro_batch_size,
                global_batch_size=tc.actor.global_batch_size,
                seed=tc.runner.seed,
                num_threads=tc.runner.torch_num_threads,
                training_threads=tc.training_threads,
                fsdp=tc.actor.fsdp_config,
                enable_offload=tc.actor.enable_offload,
            )

        # rollout ranks -> actor ranks: the model side of the trajectories (in-process / Ray's object store)
        self.trajectory_channel = self.backend.create_channel(name=None) if need_train else None
        # actor -> rollout weights: in one process on the local backend, else worker to worker over a peer group
        self.weights = (
            WeightSyncCoordinator(self.actor, self.rollout, in_process=cluster.backend == "local")
            if self.actor is not None
            else None
        )
        self.pid_file = pid_file
        for group in [*self.env_train, self.env_eval]:
            group.on_restart = self._after_restart
        self.rollout.on_restart = self._after_rollout_restart
        self.write_pids()

    def actor_rows(self, rows: Any) -> list[tuple[int, int]]:
        """The env rows [start, stop) each actor rank trains on: `rows` is a `RolloutShard` or (number of rows,
        rows that must stay on one rank), e.g. `trajectories.rollout_rows`.

        Raises:
            ValueError: a GRPO group would be cut, or an actor rank would get no group (names the keys).
        """
        assert self.actor is not None
        total, unit = (len(rows.rows), rows.split_unit) if hasattr(rows, "rows") else rows
        try:
            return unit_bounds(total, self.actor.world_size, unit=unit, name="the rollout's env rows")
        except ValueError as exc:
            raise ValueError(
                f"{exc}. The actor's {self.actor.world_size} ranks (cluster.component_placement) each train on whole "
                f"groups of algorithm.group_size={unit} env rows, and an iteration has env.train.num_envs x "
                f"algorithm.rollout_epoch = {total} rows: raise env.train.num_envs or algorithm.rollout_epoch, or "
                "place the actor on fewer ranks"
            ) from None

    def _after_restart(self, rank: int) -> None:
        self.write_pids()

    def _after_rollout_restart(self, rank: int) -> None:
        if self.weights is not None:  # evaluation only: the rollout was built from the model path
            self.weights.resync(rank)
        self.write_pids()

    def write_pids(self) -> None:
        """Write `worker_pids()` to `pid_file` (atomically; nothing without a `pid_file`)."""
        if self.pid_file is None:
            return
        write_atomic(self.pid_file, json.dumps(self.worker_pids()))

    @property
    def worker_restarts(self) -> int:
        """Worker processes replaced after they died, over every group of the run (`cluster/actor_restarts`)."""
        return sum(g.num_restarts for g in self.groups)

    def _group(self, cls: type, placements: Any, name: str, max_restarts: int, **kwargs: Any) -> WorkerGroup:
        group = WorkerGroup(
            cls,
            placements,
            backend=self.backend,
            name=name,
            kwargs=kwargs,
            max_restarts=max_restarts,
            timeout_s=self.timeout_s,
            start_timeout_s=self.start_timeout_s,
        )
        self.groups.append(group)
        return group

    def close(self) -> None:
        """Close the simulators, stop every worker and the backend. A group with a worker that does not answer (a
        call past its timeout, or its node lost) is stopped without closing: its simulators go with its processes."""
        lost = self.backend.lost_node() if self.backend is not None else None
        envs = [*getattr(self, "env_train", []), *([self.env_eval] if hasattr(self, "env_eval") else [])]
        for group in envs:
            if group.hung or (lost is not None and any(p.node_rank == lost[0] for p in group.placements)):
                continue
            try:
                group.close()
            except Exception as exc:  # keep shutting the rest down
                warnings.warn(f"closing {group.name} failed: {exc}", stacklevel=2)
        for group in self.groups:
            group.shutdown()
        channel_shutdown = getattr(getattr(self, "trajectory_channel", None), "shutdown", None)
        if channel_shutdown is not None:  # the Ray channel's queue actor
            try:
                channel_shutdown()
            except Exception as exc:
                warnings.warn(f"closing the trajectory channel failed: {exc}", stacklevel=2)
        shutdown = getattr(self.backend, "shutdown", None)
        if shutdown is not None:
            shutdown()

    def worker_pids(self) -> dict[str, list[int]]:
        """Process id of every worker, by group (the local backend runs them all in this process)."""
        return {g.name: [int(p["pid"]) for p in g.ping()] for g in self.groups}

    def __enter__(self) -> RunWorkers:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, WorkerTimeout):
            self._name_unresponsive(exc)
        self.close()

    def _name_unresponsive(self, exc: WorkerTimeout) -> None:
        """A call timed out: probe every worker (Ray answers on a thread of its own even while a call runs), so the
        line names a stopped process rather than the busy one that waited for it; those are stopped without
        waiting."""
        for group in self.groups:
            for rank in group.unresponsive(timeout_s=5.0) or []:
                exc.unresponsive.append((group.name, rank, group.handles[rank].where))
