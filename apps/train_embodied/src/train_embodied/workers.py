"""The three worker classes of a run: simulators, rollout policy, trained actor.

They are vla_infra `Worker`s, so the same classes run in-process (LocalBackend) or as Ray actors
(RayBackend); `@register` says how a group call splits its inputs across ranks. Data crossing a worker
boundary is numpy / torch in typed batches (`train_embodied.batches`: a `Prediction`, an `EnvStep`, the update's
`SampleBatch`) and observation dicts (picklable for Ray).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from train_embodied.advantages import compute_advantages, flatten_for_update
from train_embodied.batches import EnvStep, Prediction, SampleBatch
from train_embodied.config.sections import (
    AlgorithmSection,
    FSDPSection,
    ModelSection,
    OptimSection,
    RolloutSection,
)
from train_embodied.numerics import SKIPPED_MINIBATCHES
from train_embodied.policy_io import (
    build_optimizer,
    build_policy_for_run,
    frozen_copy,
    policy_values,
    select_proprio,
)
from train_embodied.seeds import rank_seed, row_seed
from train_embodied.sharding import (
    rank_summary,
    rank_task_groups,
    sample_layout,
    save_unsharded,
    shard_policy,
)
from train_embodied.trajectories import (
    RolloutShard,
    TrajectoryRecorder,
    assemble_rollout,
    combine_rank_stats,
)
from train_embodied.unsharded import apply_fsdp_settings
from train_embodied.update import UpdateSettings, ppo_update
from vla_algos import explained_variance
from vla_envs import EnvConfig, empty_episode_metrics, make_env, task_grouping
from vla_infra import (
    Channel,
    ModelOffloader,
    OffloadableEnv,
    WeightSync,
    Worker,
    all_reduce_sum,
    concat_values,
    gather_objects,
    is_offloaded,
    offload_env,
    register,
    reload_env,
)
from vla_models import concat_forward_inputs


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
    def chunk_step(self, actions: np.ndarray) -> EnvStep:
        """Step actions [B, C, A] (split across ranks).

        `lost_mask` bool [B] marks rows whose episode was lost with a dead process, one rule for both kinds: a
        simulator subprocess of this rank (`StepResult.lost`; the env restarts it and the row starts again from its
        reset) or this worker's own process: on a replacement's first step every row ends as truncated at chunk
        position 0 (no reward; `final_obs` is the replacement's start observation, as the last one died with the
        process) and starts again from the last reset. Those episodes are counted in
        `fault_stats()["lost_episodes"]`, not in the episode metrics."""
        if self._boundary_pending:
            return self._lost_boundary(int(actions.shape[1]))
        res = self.env.chunk_step(actions)
        self._obs = res.obs
        return EnvStep(
            obs=res.obs,
            rewards=res.rewards,
            terminated=res.terminated,
            truncated=res.truncated,
            final_obs=res.final_obs,
            final_mask=res.final_mask,
            episode_metrics=res.episode_metrics,
            lost_mask=np.asarray(res.lost, dtype=bool),  # a simulator process of this rank died
        )

    def _lost_boundary(self, chunk: int) -> EnvStep:
        assert self._obs is not None, "a replaced env worker steps only after a replayed reset"
        self._boundary_pending = False
        n = len(self._obs["task_descriptions"])
        self._lost_episodes += n
        truncated = np.zeros((n, chunk), dtype=bool)
        truncated[:, 0] = True
        return EnvStep(
            obs=self._obs,
            rewards=np.zeros((n, chunk), dtype=np.float32),
            terminated=np.zeros((n, chunk), dtype=bool),
            truncated=truncated,
            final_obs=self._obs,
            final_mask=np.ones(n, dtype=bool),
            episode_metrics=empty_episode_metrics(n),
            lost_mask=np.ones(n, dtype=bool),
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

    @register("one_to_all", collect="none", restart=False)
    def close(self) -> None:
        """Stop the simulators."""
        self.env.close()


def join_predictions(outputs: list[Prediction]) -> Prediction:
    """The rollout ranks' `predict` outputs as one batch (rank order): prompts of different widths (tasks with
    instructions of different lengths on different ranks) are left-padded to the widest."""
    return Prediction(
        actions=concat_values([o.actions for o in outputs]),
        logprobs=concat_values([o.logprobs for o in outputs]),
        values=concat_values([o.values for o in outputs]),
        forward_inputs=concat_forward_inputs([o.forward_inputs for o in outputs])
        if outputs[0].forward_inputs
        else {},
    )


@contextmanager
def _resident(offloader: ModelOffloader | None) -> Iterator[None]:
    """What `offloader` holds on its device inside the block, back in host memory after it (None: nothing)."""
    if offloader is None:
        yield
        return
    offloader.reload()
    try:
        yield
    finally:
        offloader.offload()


class RolloutWorker(Worker):
    """The rollout policy (no gradients): samples actions and values for the env workers.

    Args:
        model: The `actor.model` section.
        env_spec: `EnvWorker.spec()` (action dimension and range).
        sampling: The `rollout` section (temperature, top_k, `enable_offload`: the policy leaves the device
            after each rollout / evaluation (`offload`, called by the runner) and comes back on the next
            `predict`, `values` or `load_weights`).
    """

    def __init__(
        self, model: ModelSection, env_spec: dict[str, Any], sampling: RolloutSection, num_threads: int = 1
    ) -> None:
        if num_threads > 0:  # matters in a Ray actor process; in-process it is the runner's setting
            torch.set_num_threads(num_threads)
        self.policy = build_policy_for_run(model, env_spec, device=self.device)
        self.policy.eval()
        self.sampling = sampling
        self.model_section = model
        self.weight_sync = WeightSync.receiver(self.policy, rank=self.rank)
        self.offloader = ModelOffloader(self.policy, enabled=sampling.enable_offload)
        self.offloader.offload()
        self.recorder = TrajectoryRecorder()
        self._sampling_seed = 0
        self._row_generators: dict[int, torch.Generator] = {}

    @register("one_to_all", collect="none")
    def clear_trajectories(self) -> None:
        """Forget the decisions recorded so far (the start of an iteration's rollouts)."""
        self.recorder.clear()

    @register("one_to_all", collect="none")
    def hand_over(self, channel: Channel, bounds: list[tuple[int, int]]) -> None:
        """Put the recorded decisions on `channel`, to each actor rank a (key a) one list with the pieces of the rows
        it trains on (`bounds[a]` = [start, stop) of global rows; an empty list when this rank has none), then
        forget them. On the Ray backend the pieces go through the object store, never through the driver."""
        for a, pieces in enumerate(self.recorder.pieces(bounds)):
            channel.put(pieces, key=a)
        self.recorder.clear()

    @register("one_to_all", collect="none")
    def offload(self) -> None:
        """End of a rollout or evaluation phase: move the policy to host memory (no-op unless enable_offload)."""
        self.offloader.offload()

    @register("one_to_all", collect="first")
    def offload_state(self) -> dict[str, bool]:
        """Whether the policy is offloaded now (`rollout.enable_offload`)."""
        return {"model": is_offloaded(self.policy)}

    @register("one_to_all", collect="none", replay=True)
    def set_global_step(self, step: int) -> None:
        """The training iteration, for policies with a schedule over training (pi0's `noise_anneal`)."""
        self.policy.set_global_step(step)

    @register("one_to_all", collect="none", replay=True)
    def seed(self, seed: int) -> None:
        """Re-seed the sampling RNG (each epoch: a resumed run samples exactly as an uninterrupted one).

        A training rollout (`predict(rows=...)`) samples each env row from its own generator, seeded by (`seed`,
        global row id): what a row samples does not depend on how the rows are split over rollout ranks or
        batched. Other calls (evaluation) draw from this rank's stream of `seed`."""
        torch.manual_seed(rank_seed(seed, self.rank))
        self._sampling_seed = int(seed)
        self._row_generators = {}

    def _generators(self, rows: np.ndarray) -> list[torch.Generator]:
        """Each row's sampling generator (created at its first decision after `seed`, then continued)."""
        out = []
        for row in (int(r) for r in rows):
            gen = self._row_generators.get(row)
            if gen is None:
                gen = torch.Generator(device=self.device).manual_seed(row_seed(self._sampling_seed, row))
                self._row_generators[row] = gen
            out.append(gen)
        return out

    @register("split", collect=join_predictions)
    @torch.no_grad()
    def predict(
        self,
        obs: dict[str, Any],
        mode: str = "sample",
        weight_version: int | None = None,
        rows: np.ndarray | None = None,
    ) -> Prediction:
        """Actions [B, C, A], token logprobs [B, C, A], values [B] (or None) and forward_inputs.

        `weight_version`: the version the run last synced; a rollout holding another one raises
        StaleWeightsError instead of generating. `rows`: int64 [B] global row ids of a training rollout (split
        with `obs`): each row samples from its own generator (`seed`), and this rank keeps the model side of the
        decision for the actor (`hand_over`) and answers the actions alone.
        """
        self.weight_sync.check_version(weight_version)
        self.offloader.reload()  # no-op unless offloaded
        out = self.policy.predict(
            select_proprio(obs, self.model_section),
            mode=mode,
            temperature=self.sampling.temperature,
            top_k=self.sampling.top_k if (self.sampling.top_k or 0) > 0 else None,
            generator=None if rows is None else self._generators(np.asarray(rows)),
        )
        pred = Prediction(
            actions=out.actions.float().cpu(),
            logprobs=out.logprobs.float().cpu(),
            values=None if out.values is None else out.values.float().cpu(),
            forward_inputs={k: v.cpu() for k, v in out.forward_inputs.items()},
        )
        if rows is None:
            return pred
        self.recorder.record(np.asarray(rows), pred)
        return Prediction(actions=pred.actions, logprobs=None, values=None, forward_inputs={})

    @register("split")
    @torch.no_grad()
    def values(self, obs: dict[str, Any]) -> torch.Tensor:
        """V(obs) float32 [B] (zeros when the policy has no value head)."""
        self.offloader.reload()
        return policy_values(self.policy, select_proprio(obs, self.model_section)).float().cpu()

    # the rollout's end of the weight protocol, called by `vla_infra.WeightSyncCoordinator`
    @register("one_to_all", collect="none", replay=True)
    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Weight sync in one process (local backend): copy the actor's parameters into the rollout policy."""
        self.offloader.reload()
        self.weight_sync.load(state_dict, version)

    @register("one_to_all", collect="none")
    def join_weight_sync(self, host: str, port: int, world_size: int, backend: str) -> None:
        self.weight_sync.join(host, port, world_size, backend)

    # not replayed on a replacement (the coordinator re-syncs it), and not retried on one: the sender's group it
    # waits in is gone, so the driver syncs again from the start
    @register("one_to_all", collect="first", restart=False)
    def receive_weights(self, version: int) -> dict[str, int]:
        self.offloader.reload()
        return self.weight_sync.receive(version)

    @register("one_to_all", collect="first")
    def weight_version(self) -> int:
        """The weight version this rollout rank holds (-1: never synced)."""
        return self.weight_sync.version

    @register("one_to_all", collect="first")
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The rollout policy's parameters and buffers as CPU tensors (checks that a sync arrived intact)."""
        self.offloader.reload()
        return {k: v.detach().cpu().clone() for k, v in self.policy.state_dict().items()}


class ActorWorker(Worker):
    """The trained policy, its optimizer, and the PPO/GRPO update.

    Args:
        model: The `actor.model` section.
        env_spec: `EnvWorker.spec()`.
        optim: The `actor.optim` section.
        algorithm: The `algorithm` section.
        micro_batch_size, global_batch_size: Samples per backward pass / per optimizer step.
        seed: Seed of the minibatch shuffling generator.
        fsdp: The `actor.fsdp_config` section. With more than one rank (one process each, Ray backend) every
            rank joins the group's process group and the policy is sharded with FSDP2; one rank trains a plain
            module whatever `fsdp.strategy` says, with its other settings applied to it
            (`train_embodied.unsharded`: gradient checkpointing, mixed precision as autocast).
        enable_offload: `actor.enable_offload`: between calls the policy's parameters, gradients and the
            optimizer state live in host memory; each method that needs them moves them back first.

    Methods that run collectives on a sharded policy (update, state_dict, checkpoints, save_pretrained) are
    dispatched to every rank; rank 0 returns the result (full, unsharded CPU tensors).
    """

    def __init__(
        self,
        model: ModelSection,
        env_spec: dict[str, Any],
        optim: OptimSection,
        algorithm: AlgorithmSection,
        micro_batch_size: int,
        global_batch_size: int,
        seed: int,
        num_threads: int = 1,
        fsdp: FSDPSection | None = None,
        enable_offload: bool = False,
    ) -> None:
        if num_threads > 0:
            torch.set_num_threads(num_threads)
        self.sharded = self.world_size > 1
        if self.sharded:
            self.init_process_group()  # gloo on the CPU, nccl on a GPU; rendezvous at rank 0's node
        torch.manual_seed(seed)  # every rank builds the same initial weights, then keeps its shard
        self.policy = build_policy_for_run(model, env_spec, device=self.device)
        # the KL penalty's reference: a frozen copy of the starting weights (`actor.model.model_path`; a resumed
        # run rebuilds it from there before loading the checkpoint, so it stays the same)
        self.reference = frozen_copy(self.policy) if algorithm.kl_beta > 0 else None
        if self.sharded:
            for module in (self.policy, self.reference):
                if module is not None:
                    shard_policy(
                        module, fsdp or FSDPSection(strategy="fsdp2", sharding_strategy="full_shard")
                    )
        elif fsdp is not None:  # one process: each fsdp_config setting applied to the plain module
            apply_fsdp_settings(self.policy, fsdp)
            if self.reference is not None:
                apply_fsdp_settings(self.reference, fsdp, trained=False)
        self.policy.eval()
        self.weight_sync = WeightSync.sender(self.policy, rank=self.rank, host=self.info.master_addr)
        self.optimizer = build_optimizer(self.policy, optim)
        self.settings = UpdateSettings.from_sections(algorithm, optim, micro_batch_size, global_batch_size)
        self.algorithm = algorithm
        self.generator = torch.Generator().manual_seed(seed)
        self.global_step = 0
        self.policy_step = 0  # optimizer steps that trained the policy (the lr warmup's clock)
        self.offloader = ModelOffloader(self.policy, self.optimizer, enabled=enable_offload)
        self.offloader.offload()
        self.reference_offloader = None
        if self.reference is not None:
            self.reference_offloader = ModelOffloader(self.reference, enabled=enable_offload)
            self.reference_offloader.offload()

    @contextmanager
    def _on_device(self) -> Iterator[None]:
        """Policy and optimizer on the worker's device inside the block, back in host memory after it."""
        with _resident(self.offloader):
            yield

    @contextmanager
    def _reference_on_device(self) -> Iterator[None]:
        """The KL reference policy (if any) on the worker's device inside the block."""
        with _resident(self.reference_offloader):
            yield

    @register("one_to_all", collect="first")
    def offload_state(self) -> dict[str, bool]:
        """Whether the policy and the optimizer state are offloaded now (`actor.enable_offload`)."""
        return {"model": is_offloaded(self.policy), "optimizer": is_offloaded(self.optimizer)}

    @register("one_to_all", collect="first")
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The policy's parameters and buffers as full CPU tensors (for weight sync and checkpoints)."""
        with self._on_device():
            if self.sharded:
                from vla_infra import full_state_dict

                return full_state_dict(self.policy)  # a collective: rank 0 gets everything, the others {}
            return {k: v.detach().cpu().clone() for k, v in self.policy.state_dict().items()}

    # the actor's end of the weight protocol, called by `vla_infra.WeightSyncCoordinator`
    @register("rank_zero")
    def weight_sync_endpoint(self) -> tuple[str, int]:
        return self.weight_sync.endpoint()

    @register("one_to_all", collect="none")
    def join_weight_sync(self, host: str, port: int, world_size: int, backend: str) -> None:
        self.weight_sync.join(host, port, world_size, backend)

    @register("one_to_all", collect="none")
    def send_weights(self, version: int) -> None:
        with self._on_device():
            self.weight_sync.send(version)

    @register("one_to_all", collect="first")
    def update(
        self, batch: SampleBatch, seed: int, train_policy: bool = True, lr_scale: float = 1.0
    ) -> dict[str, float]:
        """Run `update_epoch` passes of minibatch PPO/GRPO over `batch`, the whole rollout, on one actor rank
        (see update.ppo_update; several ranks train on their shares of a rollout: `train_on_rollout`).

        `seed` re-seeds the minibatch shuffling, so a resumed run shuffles exactly as an uninterrupted one;
        `train_policy=False` trains only the critic (warm-up iterations); `lr_scale` is the iteration's
        learning-rate decay factor (`update.lr_decay_scale`).
        """
        if self.world_size > 1:
            raise ValueError(
                f"ActorWorker.update takes the whole rollout on one rank; this group has {self.world_size} ranks, "
                "which train on their data-parallel shares (train_on_rollout)"
            )
        return self._train(batch, seed, train_policy, None, lr_scale)

    def _train(
        self, batch: SampleBatch, seed: int, train_policy: bool, layout: Any, lr_scale: float = 1.0
    ) -> dict[str, float]:
        self.generator.manual_seed(int(seed))
        # eval mode on purpose: no dropout, so the recomputed log-probs match the rollout's (ratio 1 at first)
        self.policy.eval()
        with self._on_device(), self._reference_on_device():
            metrics, steps = ppo_update(
                self.policy,
                self.optimizer,
                batch,
                self.settings,
                generator=self.generator,
                start_step=self.policy_step,  # the lr warmup runs over the whole run, not per rollout
                train_policy=train_policy,
                rank=self.rank,
                world_size=self.world_size,
                layout=layout,
                reference=self.reference,
                lr_scale=lr_scale,
            )
        self.global_step += steps
        if train_policy:
            self.policy_step += steps
        return metrics

    @register("dp_split", collect="first")
    def train_on_rollout(
        self,
        shard: RolloutShard,
        channel: Channel,
        num_parts: int,
        seed: int,
        train_policy: bool = True,
        lr_scale: float = 1.0,
    ) -> tuple[dict[str, float], list[str]]:
        """Advantages and the update on this rank's data-parallel share of an iteration's rollouts.

        `shard` is this rank's whole env rows (the env side; `vla_infra` dispatch `dp_split` never cuts a GRPO
        group); the model side of those rows comes from the `num_parts` rollout ranks over `channel` (key = this
        rank). Advantages are computed here (GAE needs whole time columns: this rank has them); whitening, the
        logged rollout statistics and the critic's explained variance are those of the whole rollout, and every
        rank draws the same minibatches of the whole rollout, so the update is the one a single process makes.
        `lr_scale`: the iteration's learning-rate decay factor (`update.lr_decay_scale`).

        Returns:
            (metrics: `train/*` and `rollout/*`, the names of non-finite update inputs; when there are any the
            update is skipped on every rank).
        """
        parts = channel.get_batch(int(num_parts), key=self.rank, timeout=600.0)
        batch = assemble_rollout(shard, [piece for part in parts for piece in part])
        # collectives before the update: the task groups' numbering (the advantages need it), the whitening sums
        # inside compute_advantages (they need the groups), then one gather of every rank's summary
        groups = None
        if self.sharded and self.algorithm.per_task_advantages != "none" and batch.task_ids is not None:
            groups = rank_task_groups(batch.task_ids)  # per-task statistics over every rank's rows
        adv = compute_advantages(
            batch, self.algorithm, all_reduce=all_reduce_sum if self.sharded else None, task_groups=groups
        )
        samples = flatten_for_update(batch, adv)
        t = batch.rewards.shape[0]
        summary = rank_summary(
            samples, adv.stats, adv.stat_weights, first_row=int(shard.rows[0]), num_steps=t
        )
        summaries = gather_objects(summary)  # the one gather of this update
        stats = combine_rank_stats([(r.stats, r.stat_weights) for r in summaries])
        bad = sorted({name for r in summaries for name in r.nonfinite})
        if bad:  # NaN/inf advantages or returns would reach the weights: skip this update (on every rank)
            return {SKIPPED_MINIBATCHES: 1.0, **stats}, bad
        layout = sample_layout([r.samples for r in summaries], t) if self.sharded else None
        metrics = self._train(samples, seed, train_policy, layout, lr_scale)
        critic = [r.critic for r in summaries if r.critic is not None]
        if critic:  # over the whole rollout (a micro-batch's can be NaN)
            values = torch.cat([c[0] for c in critic])
            returns = torch.cat([c[1] for c in critic])
            metrics["train/critic/explained_variance"] = float(explained_variance(values, returns))
        return {**metrics, **stats}, []

    @register("one_to_all", collect="first")
    def save_checkpoint(self, path: str, trainer_state: dict[str, Any]) -> str:
        """Atomically write model + optimizer + trainer state + RNG states (vla_infra checkpoint I/O; sharded:
        every rank writes its optimizer shards, rank 0 the full weights)."""
        from vla_infra import save_checkpoint

        state = {**trainer_state, "global_step": self.global_step, "policy_step": self.policy_step}
        with self._on_device():
            return str(save_checkpoint(path, self.policy, self.optimizer, state, overwrite=True))

    @register("one_to_all", collect="first")
    def load_checkpoint(self, path: str) -> dict[str, Any]:
        """Restore model, optimizer and RNG states from `save_checkpoint`'s folder; returns the trainer state."""
        from vla_infra import load_checkpoint

        with self._on_device():
            loaded = load_checkpoint(path, model=self.policy, optimizer=self.optimizer)
        state = dict(loaded.trainer_state)
        self.global_step = int(state.get("global_step", 0))
        # checkpoints written before policy_step existed: count every step as a policy step
        self.policy_step = int(state.get("policy_step", self.global_step))
        return state

    @register("rank_zero")
    def global_steps(self) -> int:
        """Optimizer steps taken so far."""
        return self.global_step

    @register("one_to_all", collect="first")
    def save_pretrained(self, path: str) -> str:
        """Write the policy with `save_pretrained` (loadable by `actor.model.model_path`)."""
        with self._on_device():
            if not self.sharded:
                self.policy.save_pretrained(path)
                return path
            from vla_infra import full_state_dict

            weights = full_state_dict(self.policy)  # a collective: rank 0 keeps the full weights
        if self.rank == 0:
            save_unsharded(self.policy, weights, path)
        return path
