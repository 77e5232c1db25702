"""Named seed streams: reproducible, and no two streams, epochs, stages or ranks share a seed."""

from __future__ import annotations

from train_embodied import seeds
from train_embodied.seeds import rank_seed, stream_seed

STREAMS = [
    seeds.ROLLOUT_SAMPLING,
    seeds.TRAIN_RESET,
    seeds.GROUP_STARTS,
    seeds.UPDATE_SHUFFLE,
    seeds.EVAL_SAMPLING,
    seeds.ENV_STAGE,
]


def test_seeds_are_functions_of_run_stream_and_keys() -> None:
    assert stream_seed(1, seeds.TRAIN_RESET, 3, 1) == stream_seed(1, seeds.TRAIN_RESET, 3, 1)
    assert 0 <= stream_seed(-5, seeds.TRAIN_RESET) < 2**32  # any int run seed is accepted


def test_no_two_draws_of_a_run_or_of_nearby_runs_share_a_seed() -> None:
    drawn = [
        stream_seed(run, stream, epoch, stage)
        for run in range(3)
        for stream in STREAMS
        for epoch in range(20)
        for stage in range(3)
    ]
    drawn += [rank_seed(run, rank) for run in range(3) for rank in range(8)]
    assert len(set(drawn)) == len(drawn)
    # what `seed + k` offsets used to collide on: stage 1's reset seed and the update shuffle of the same epoch
    assert stream_seed(0, seeds.TRAIN_RESET, 4, 1) != stream_seed(0, seeds.UPDATE_SHUFFLE, 4)
    # a rank's share of run 0 is not run 1's seed (rank offsets overlapped the run seeds)
    assert rank_seed(0, 1) not in {stream_seed(r, s, 0) for r in range(3) for s in STREAMS}
