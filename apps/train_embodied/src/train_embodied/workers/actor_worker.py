"""The actor worker: the trained policy, its optimizer, and the PPO/GRPO update on its share of a rollout."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import torch

from train_embodied.advantages import compute_advantages, flatten_for_update
from train_embodied.batches import SampleBatch
from train_embodied.config.sections import AlgorithmSection, FSDPSection, ModelSection, OptimSection
from train_embodied.data_parallel import (
    SampleLayout,
    combine_rank_stats,
    rank_summary,
    rank_task_groups,
    sample_layout,
)
from train_embodied.numerics import (
    NONFINITE_FINAL_LOSS,
    SKIPPED_MINIBATCHES,
    first_nonfinite_weight,
    nonfinite_loss_terms,
)
from train_embodied.policy_io import build_optimizer, build_policy_for_run, frozen_copy
from train_embodied.sharding import save_unsharded, shard_policy
from train_embodied.trajectories import RolloutShard, assemble_rollout
from train_embodied.unsharded import apply_fsdp_settings
from train_embodied.update import ppo_update
from vla_algos import explained_variance
from vla_infra import (
    Channel,
    ModelOffloader,
    WeightSenderWorker,
    WeightSync,
    all_reduce_sum,
    gather_objects,
    is_offloaded,
    register,
)
from vla_models import Policy


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


@contextmanager
def torch_threads(num_threads: int) -> Iterator[None]:
    """torch's intra-op threads set to `num_threads` inside the block, restored after it (0: unchanged). On the
    local backend the actor shares its process with the rollout: the update alone takes the cores the
    simulators leave idle while it runs."""
    before = torch.get_num_threads()
    if num_threads > 0:
        torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class ActorWorker(WeightSenderWorker):
    """The trained policy, its optimizer, and the PPO/GRPO update; the sending end of the weight sync
    (`WeightSenderWorker`: `weight_sync_endpoint`, `join_weight_sync`, `send_weights`).

    Args:
        model: The `actor.model` section.
        env_spec: `EnvWorker.spec()`.
        optim: The `actor.optim` section.
        algorithm: The `algorithm` section.
        micro_batch_size, global_batch_size: Samples per backward pass / per optimizer step.
        seed: Seed of the minibatch shuffling generator.
        num_threads: torch's intra-op threads of the worker (`runner.torch_num_threads`; 0: torch's default).
        training_threads: Intra-op threads inside an update (`TrainConfig.training_threads`; 0: `num_threads`).
        fsdp: The `actor.fsdp_config` section. With more than one rank (one process each, Ray backend) every
            rank joins the group's process group and the policy is sharded with FSDP2; one rank trains a plain
            module whatever `fsdp.strategy` says, with its other settings applied to it
            (`train_embodied.unsharded`: gradient checkpointing, mixed precision as autocast).
        enable_offload: `actor.enable_offload`: between calls the policy's parameters, gradients and the
            optimizer state live in host memory; each method that needs them moves them back first.

    Methods that run collectives on a sharded policy (train, state_dict, checkpoints, save_pretrained) are
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
        training_threads: int = 0,
        fsdp: FSDPSection | None = None,
        enable_offload: bool = False,
    ) -> None:
        if num_threads > 0:
            torch.set_num_threads(num_threads)
        self.training_threads = training_threads
        self.sharded = self.world_size > 1
        if self.sharded:
            self.init_process_group()  # gloo on the CPU, nccl on a GPU; rendezvous at rank 0's node
        torch.manual_seed(seed)  # every rank builds the same initial weights, then keeps its shard
        self.policy: Policy = build_policy_for_run(model, env_spec, device=self.device)
        # the KL penalty's reference: a frozen copy of the starting weights (`actor.model.model_path`; a resumed
        # run rebuilds it from there before loading the checkpoint, so it stays the same)
        self.reference: Policy | None = frozen_copy(self.policy) if algorithm.kl_beta > 0 else None
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
        self.algorithm, self.optim = algorithm, optim
        self.micro_batch_size, self.global_batch_size = micro_batch_size, global_batch_size
        self.generator = torch.Generator().manual_seed(seed)
        self.optimizer_step = 0  # optimizer steps taken, critic warm-up included
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

    def _weights_on_device(self) -> AbstractContextManager[None]:
        """A weight sync reads the policy on the device (`send_weights`)."""
        return self._on_device()

    @register("one_to_all", collect="first")
    def train(
        self,
        samples: SampleBatch,
        seed: int,
        *,
        train_policy: bool = True,
        layout: SampleLayout | None = None,
        lr_scale: float = 1.0,
    ) -> dict[str, float]:
        """`update_epoch` passes of minibatch PPO/GRPO over `samples` (`update.ppo_update`), the policy on this
        worker's device and the training threads set; the optimizer-step counts move on.

        `seed` re-seeds the minibatch shuffling, so a resumed run shuffles exactly as an uninterrupted one;
        `train_policy=False` trains only the critic (warm-up iterations); `layout`: where the whole rollout's
        samples live when several ranks train on their shares (`train_on_rollout`), None: `samples` is the whole
        rollout; `lr_scale` is the iteration's learning-rate decay factor (`update.lr_decay_scale`).
        """
        if self.sharded and layout is None:
            raise ValueError(
                f"ActorWorker.train without a layout takes the whole rollout on one rank; this group has "
                f"{self.world_size} ranks, which train on their data-parallel shares (train_on_rollout)"
            )
        self.generator.manual_seed(int(seed))
        # eval mode on purpose: no dropout, so the recomputed log-probs match the rollout's (ratio 1 at first)
        self.policy.eval()
        with self._on_device(), self._reference_on_device(), torch_threads(self.training_threads):
            metrics, steps = ppo_update(
                self.policy,
                self.optimizer,
                samples,
                self.algorithm,
                self.optim,
                micro_batch_size=self.micro_batch_size,
                global_batch_size=self.global_batch_size,
                generator=self.generator,
                start_step=self.policy_step,  # the lr warmup runs over the whole run, not per rollout
                train_policy=train_policy,
                rank=self.rank,
                world_size=self.world_size,
                layout=layout,
                reference=self.reference,
                lr_scale=lr_scale,
            )
        self.optimizer_step += steps
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
    ) -> tuple[dict[str, float], list[str], str | None]:
        """Advantages and the update on this rank's data-parallel share of an iteration's rollouts.

        `shard` is this rank's whole env rows (the env side; `vla_infra` dispatch `dp_split` never cuts a GRPO
        group); the model side of those rows comes from the `num_parts` rollout ranks over `channel` (key = this
        rank). Advantages are computed here (GAE needs whole time columns: this rank has them); whitening, the
        logged rollout statistics and the critic's explained variance are those of the whole rollout, and every
        rank draws the same minibatches of the whole rollout, so the update is the one a single process makes.
        `lr_scale`: the iteration's learning-rate decay factor (`update.lr_decay_scale`).

        Returns:
            (metrics: `train/*` and `rollout/*`, the names of non-finite update inputs (when there are any the
            update is skipped on every rank), and why the weights the update ends with must not be used (NaN/inf in
            them, or a NaN/inf loss they give; None when they are fine).
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
            return {SKIPPED_MINIBATCHES: 1.0, **stats}, bad, None
        layout = sample_layout([r.samples for r in summaries], t) if self.sharded else None
        metrics = self.train(samples, seed, train_policy=train_policy, layout=layout, lr_scale=lr_scale)
        diverged = None  # why the weights this update ends with are not to be saved or sampled with
        if metrics.pop(NONFINITE_FINAL_LOSS, 0.0):  # every rank has the whole minibatches' metrics
            terms = ", ".join(nonfinite_loss_terms(metrics)) or "train/loss"
            diverged = f"they give a NaN/inf loss on the update's last minibatch ({terms})"
        with self._on_device():
            weights = [w for w in gather_objects(first_nonfinite_weight(self.policy)) if w]
        if weights:
            diverged = f"they hold NaN/inf (first: {weights[0]})"
        critic = [r.critic for r in summaries if r.critic is not None]
        if critic:  # over the whole rollout (a micro-batch's can be NaN)
            values = torch.cat([c[0] for c in critic])
            returns = torch.cat([c[1] for c in critic])
            metrics["train/critic/explained_variance"] = float(explained_variance(values, returns))
        return {**metrics, **stats}, [], diverged

    @register("one_to_all", collect="first")
    def save_checkpoint(self, path: str, trainer_state: dict[str, Any]) -> str:
        """Atomically write model + optimizer + trainer state + RNG states (vla_infra checkpoint I/O; sharded:
        every rank writes its optimizer shards, rank 0 the full weights)."""
        from vla_infra import save_checkpoint

        state = {**trainer_state, "optimizer_steps": self.optimizer_step, "policy_step": self.policy_step}
        with self._on_device():
            return str(save_checkpoint(path, self.policy, self.optimizer, state, overwrite=True))

    @register("one_to_all", collect="first")
    def load_checkpoint(self, path: str) -> dict[str, Any]:
        """Restore model, optimizer and RNG states from `save_checkpoint`'s folder; returns the trainer state."""
        from vla_infra import load_checkpoint

        with self._on_device():
            loaded = load_checkpoint(path, model=self.policy, optimizer=self.optimizer)
        state = dict(loaded.trainer_state)
        # "global_step": the same count, in a trainer state without "optimizer_steps"
        self.optimizer_step = int(state.get("optimizer_steps", state.get("global_step", 0)))
        # no "policy_step": every optimizer step counts as a policy step
        self.policy_step = int(state.get("policy_step", self.optimizer_step))
        return state

    @register("rank_zero")
    def optimizer_steps(self) -> int:
        """Optimizer steps taken so far (critic warm-up included)."""
        return self.optimizer_step

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
