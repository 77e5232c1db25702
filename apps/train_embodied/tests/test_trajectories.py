"""Trajectory hand-over: rollout ranks' recorded decisions and the driver's env side join, on each actor rank, into
exactly the rows of the whole rollout it trains on, whatever the split over rollout ranks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from train_embodied.advantages import compute_advantages
from train_embodied.batches import Prediction
from train_embodied.config.sections import AlgorithmSection
from train_embodied.data_parallel import combine_rank_stats
from train_embodied.rollout import RolloutBatch
from train_embodied.trajectories import TrajectoryRecorder, assemble_rollout, rollout_shard
from vla_infra import unit_bounds
from vla_infra.workers import split_value

T, B, C, A = 3, 6, 2, 4


def _whole(seed: int = 0) -> tuple[RolloutBatch, list[Prediction]]:
    g = torch.Generator().manual_seed(seed)
    preds = [
        Prediction(
            actions=torch.zeros(B, C, A),
            logprobs=torch.randn(B, C, A, generator=g),
            values=torch.randn(B, generator=g),
            forward_inputs={"input_ids": torch.randint(0, 9, (B, 5), generator=g)},
        )
        for _ in range(T)
    ]
    batch = RolloutBatch(
        forward_inputs={"input_ids": torch.stack([p.forward_inputs["input_ids"] for p in preds])},
        logprobs=torch.stack([p.logprobs for p in preds]),
        values=torch.stack([p.values for p in preds]),
        rewards=torch.rand(T, B, C, generator=g),
        terminated=torch.zeros(T, B, C, dtype=torch.bool),
        truncated=torch.zeros(T, B, C, dtype=torch.bool),
        final_values=torch.zeros(T, B),
        loss_mask=torch.ones(T, B, dtype=torch.bool),
        last_values=torch.randn(B, generator=g),
        task_ids=torch.randint(0, 2**40, (B,), generator=g),
    )
    return batch, preds


@pytest.mark.parametrize("rollout_ranks", [1, 2, 4])
def test_each_actor_rank_gets_exactly_its_rows(rollout_ranks: int) -> None:
    batch, preds = _whole()
    # rollout ranks see contiguous chunks of the batch (the `split` dispatch of predict) at every decision
    recorders = [TrajectoryRecorder() for _ in range(rollout_ranks)]
    for pred in preds:
        for rank, (rows, part) in enumerate(
            zip(split_value(np.arange(B), rollout_ranks), split_value(pred, rollout_ranks))
        ):
            recorders[rank].record(rows, part)
    shard = rollout_shard(batch, split_unit=3)
    bounds = unit_bounds(B, 2, unit=3)
    shares = split_value(shard, 2)
    for actor_rank, (start, stop) in enumerate(bounds):
        pieces = [p for rec in recorders for p in rec.pieces(bounds)[actor_rank]]
        mine = assemble_rollout(shares[actor_rank], pieces)
        assert torch.equal(mine.logprobs, batch.logprobs[:, start:stop])
        assert torch.equal(mine.values, batch.values[:, start:stop])
        assert torch.equal(mine.forward_inputs["input_ids"], batch.forward_inputs["input_ids"][:, start:stop])
        assert torch.equal(mine.rewards, batch.rewards[:, start:stop])
        assert torch.equal(mine.last_values, batch.last_values[start:stop])
        assert torch.equal(mine.task_ids, batch.task_ids[start:stop])
    with pytest.raises(
        ValueError, match="a rollout rank's record was lost"
    ):  # rollout rank 0's pieces missing
        assemble_rollout(shares[0], [p for rec in recorders[1:] for p in rec.pieces(bounds)[0]])


def test_stats_of_two_shares_are_those_of_the_whole_rollout() -> None:
    batch, _ = _whole(1)
    algo = AlgorithmSection(adv_type="gae", normalize_advantages=False)
    whole = compute_advantages(batch, algo)
    halves = []
    for lo, hi in ((0, 2), (2, B)):
        part = RolloutBatch(
            forward_inputs={},
            logprobs=None,
            values=batch.values[:, lo:hi],
            rewards=batch.rewards[:, lo:hi],
            terminated=batch.terminated[:, lo:hi],
            truncated=batch.truncated[:, lo:hi],
            final_values=batch.final_values[:, lo:hi],
            loss_mask=batch.loss_mask[:, lo:hi],
            last_values=batch.last_values[lo:hi],
        )
        adv = compute_advantages(part, algo)
        assert torch.allclose(adv.advantages, whole.advantages[:, lo:hi])  # GAE: whole time columns suffice
        halves.append((adv.stats, adv.stat_weights))
    joined = combine_rank_stats(halves)
    assert joined.keys() == whole.stats.keys()
    for key, value in whole.stats.items():
        assert joined[key] == pytest.approx(value, rel=1e-6), key
