"""Bit-level comparison of two state dicts, for the tests that check a weight sync delivered the actor's weights."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

#: Weights of two runs that split the same training differently (ranks, nodes) after 2 iterations: Adam divides each
#: gradient entry by its running RMS, so an entry whose gradient is near zero moves by a sizeable part of the
#: learning rate (3e-4) either way, and rounding in its gradient shows in the weights at up to ~lr/10 (2.05e-5
#: measured for PPO on one 2-core CPU, below 1e-5 on another); a split that trains on other data moves them by ~lr.
WEIGHT_TOL = 1e-4


def state_dicts_equal(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    """Whether two state dicts have the same keys and bit-identical tensors (dtype and shape included)."""

    def same_bytes(x: torch.Tensor, y: torch.Tensor) -> bool:
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        x, y = x.detach().cpu().reshape(-1), y.detach().cpu().reshape(-1)
        return torch.equal(x.view(torch.uint8), y.view(torch.uint8))

    return a.keys() == b.keys() and all(same_bytes(a[k], b[k]) for k in a)


def check_weights_at_every_sync(monkeypatch, on_sync: Callable[[Any], None] | None = None) -> list[int]:
    """Makes the runner's weight sync check itself: the real sync, then every rollout rank's weights compared bit
    for bit with the actor's, then `on_sync(workers)`. Returns the weight versions synced, filled as the run goes."""
    from train_embodied import runner

    synced: list[int] = []
    sync = runner._sync_weights

    def checked_sync(workers: Any, state: Any) -> None:
        sync(workers, state)
        version = state.weight_version
        actor = workers.actor.state_dict()
        for rank in range(workers.rollout.world_size):
            assert state_dicts_equal(actor, workers.rollout.execute_rank(rank, "state_dict")), (version, rank)
        if on_sync is not None:
            on_sync(workers)
        synced.append(version)

    monkeypatch.setattr(runner, "_sync_weights", checked_sync)
    return synced
