"""The rollout worker: the policy without gradients, sampling actions and values for the env workers and keeping
the model side of each decision for the actor."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from train_embodied.batches import Prediction
from train_embodied.config.sections import ModelSection, RolloutSection
from train_embodied.policy_io import build_policy_for_run, policy_values, select_proprio
from train_embodied.seeds import rank_seed, row_seed
from train_embodied.trajectories import TrajectoryRecorder
from vla_infra import (
    Channel,
    ModelOffloader,
    WeightReceiverWorker,
    WeightSync,
    concat_values,
    is_offloaded,
    register,
)
from vla_models import Policy, concat_forward_inputs


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


class RolloutWorker(WeightReceiverWorker):
    """The rollout policy (no gradients): samples actions and values for the env workers; the receiving end of
    the weight sync (`WeightReceiverWorker`: `load_weights`, `join_weight_sync`, `receive_weights`,
    `weight_version`).

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
        self.policy: Policy = build_policy_for_run(model, env_spec, device=self.device)
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
        """Re-seed the sampling RNG (each iteration: a resumed run samples exactly as an uninterrupted one).

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

    @contextmanager
    def _weights_on_device(self) -> Iterator[None]:
        """A weight sync writes into the policy on the device; it stays there until the phase's `offload`."""
        self.offloader.reload()
        yield

    @register("one_to_all", collect="first")
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The rollout policy's parameters and buffers as CPU tensors (checks that a sync arrived intact)."""
        self.offloader.reload()
        return {k: v.detach().cpu().clone() for k, v in self.policy.state_dict().items()}
