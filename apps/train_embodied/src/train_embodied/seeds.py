"""Named seed streams: one independent seed per (run seed, stream name, iteration / stage / rank ...).

Every random draw of a run (env starts, policy sampling, minibatch shuffles, evaluation sampling) takes its
seed from `stream_seed(run_seed, STREAM, *keys)`, so two streams never share a seed (a bare `seed + k`
scheme lets stage 1's reset seed equal the update shuffle's, and rank offsets overlap other runs' seeds).
Seeds are functions of (run seed, stream, keys) alone: a run resumed at iteration i replays iteration i exactly.

It lives in the app because only the app composes streams; the packages take plain integer seeds.
"""

from __future__ import annotations

import hashlib

import numpy as np

ROLLOUT_SAMPLING = "rollout.sampling"  # the rollout policy's action sampling, per iteration
TRAIN_RESET = "env.train.reset"  # training env starts, per iteration and pipeline stage
GROUP_STARTS = (
    "env.train.group_starts"  # start states shared by a group (grouped-start estimators), per iteration
)
UPDATE_SHUFFLE = "actor.update.shuffle"  # minibatch shuffling of the actor update, per iteration
EVAL_SAMPLING = "eval.sampling"  # the policy's sampling during held-out evaluations
ENV_STAGE = "env.stage"  # construction seed of a pipeline stage's env group
RANK = "rank"  # a worker rank's share of a seed
ROW = "row"  # an env row's own stream of a draw (the same whichever rank holds the row)


def _stream_key(stream: str) -> int:
    return int.from_bytes(hashlib.sha256(stream.encode()).digest()[:8], "little")


def stream_seed(seed: int, stream: str, *keys: int) -> int:
    """An independent 32-bit seed for `stream` of a run seeded `seed`, at non-negative int `keys`
    (iteration, stage, rank, ...), from numpy's SeedSequence (hash-mixed, no arithmetic offsets to collide)."""
    entropy = int(seed) % 2**64  # SeedSequence wants a non-negative int
    seq = np.random.SeedSequence(entropy, spawn_key=(_stream_key(stream), *(int(k) for k in keys)))
    return int(seq.generate_state(1)[0])


def rank_seed(seed: int, rank: int) -> int:
    """The seed a worker of rank `rank` uses for its rows of a draw seeded `seed`."""
    return stream_seed(seed, RANK, rank)


def row_seed(seed: int, row: int) -> int:
    """The seed of global env row `row`'s own stream of a draw seeded `seed` (independent of how rows are split
    over ranks)."""
    return stream_seed(seed, ROW, row)
