"""Data-parallel bookkeeping: the sample layout of a rollout spread over ranks, from the per-rank summaries the
ranks exchange in one gather before the update (here the gather is a list of two ranks' summaries, in rank order),
and each rank's micro-batches of a minibatch."""

from __future__ import annotations

import torch

from train_embodied.batches import SampleBatch
from train_embodied.data_parallel import (
    micro_batches,
    minibatch_share,
    num_micro_batches,
    rank_summary,
    sample_layout,
)

T, B, C = 3, 5, 2


def _flat(rows: slice, g: torch.Generator) -> SampleBatch:
    """The time-major samples [T * b] of env rows `rows` of one rollout (as `flatten_for_update` makes them)."""
    mask = torch.rand(T, B, generator=g) < 0.8
    action_mask = torch.rand(T, B, C, generator=g) < 0.7
    weight = torch.rand(T, B, generator=g)
    values, returns = torch.randn(T, B, generator=g), torch.randn(T, B, generator=g)
    b = len(range(B)[rows])
    return SampleBatch(
        forward_inputs={},
        old_logprobs=torch.zeros(T * b, C, 1),
        advantages=torch.zeros(T * b),
        mask=mask[:, rows].reshape(-1),
        action_mask=action_mask[:, rows].reshape(T * b, C),
        sample_weight=weight[:, rows].reshape(-1),
        old_values=values[:, rows].reshape(-1),
        returns=returns[:, rows].reshape(-1),
    )


def test_two_ranks_summaries_lay_out_the_rollout_as_one_process_flattens_it() -> None:
    whole = _flat(slice(None), torch.Generator().manual_seed(0))
    shares = [
        _flat(slice(0, 2), torch.Generator().manual_seed(0)),
        _flat(slice(2, B), torch.Generator().manual_seed(0)),
    ]
    stats = [({"rollout/x": 1.0}, {"rollout/x": 2.0}), ({"rollout/x": 3.0}, {"rollout/x": 1.0})]
    summaries = [
        rank_summary(share, *stat, first_row=first, num_steps=T)
        for share, stat, first in zip(shares, stats, (0, 2))
    ]
    layout = sample_layout([s.samples for s in summaries], T)
    assert torch.equal(layout.mask, whole.mask)
    assert torch.equal(layout.sample_weight, whole.sample_weight)
    assert torch.equal(layout.action_mask, whole.action_mask)
    # sample t * B + b lives on the rank holding row b, at its index in that rank's own flattened samples
    for n in range(T * B):
        t, b = divmod(n, B)
        rank, first, rows = (0, 0, 2) if b < 2 else (1, 2, B - 2)
        assert int(layout.owner[n]) == rank and int(layout.local[n]) == t * rows + (b - first)
    # a minibatch of the whole rollout: each rank trains on the samples it holds, as many passes on every rank
    minibatch = torch.tensor([0, 2, 3, 7, 11, 14])
    mine = [minibatch_share(minibatch, layout, r) for r in range(2)]
    # rank 0 holds samples 0 (t=0, b=0) and 11 (t=2, b=1); rank 1 samples 2, 3, 7 (t=1, b=2) and 14 (t=2, b=4)
    assert mine[0].tolist() == [0, 5] and mine[1].tolist() == [0, 1, 3, 8]
    assert num_micro_batches(minibatch, layout, 2) == 2  # rank 1's 4 samples; rank 0 pads its second pass
    assert [m.tolist() for m in micro_batches(minibatch, layout, 0, 2)] == [[0, 5], []]
    assert [m.tolist() for m in micro_batches(minibatch, layout, 1, 2)] == [[0, 1], [3, 8]]
    # the critic's values and targets of every rank's loss samples: the whole rollout's, in rank order
    values = torch.cat([s.critic[0] for s in summaries])
    assert sorted(values.tolist()) == sorted(whole.old_values[whole.mask].tolist())
    assert all(s.nonfinite == [] for s in summaries)


def test_a_rank_with_nan_advantages_is_named_in_its_summary() -> None:
    share = _flat(slice(0, 2), torch.Generator().manual_seed(1))
    share.advantages[share.mask.nonzero()[0]] = float("nan")
    summary = rank_summary(share, {}, {}, first_row=0, num_steps=T)
    assert summary.nonfinite == [f"advantages (1 of {int(share.mask.sum())})"]
