"""Trajectories stay with the workers that made them and reach the actor rank that trains on them directly.

One iteration's rollouts are B env rows ("columns": rollout r's rows are r * num_envs + row) of T decisions.

- The rollout ranks keep the model side of every decision they took (`forward_inputs`, token log-probs, values:
  the bulk of the bytes, images included) in a `TrajectoryRecorder`; `predict` answers the driver with the actions
  alone.
- The driver keeps the env side, O(T x B) scalars it needs to run the loop anyway (rewards, done flags, loss mask,
  bootstrap values), as a `RolloutShard` (batch-major, so a data-parallel split cuts whole rows: GAE needs whole
  time columns; a GRPO group of `split_unit` rows is never cut, `vla_infra` dispatch `dp_split`).
- Each rollout rank puts, for every actor rank, the pieces of its rows that actor rank trains on into a channel
  (`vla_infra.Channel`: in-process on the local backend, Ray's object store on the Ray backend, so those bytes
  never pass through the driver); the actor rank joins them with its share of the `RolloutShard`
  (`assemble_rollout`), computes the advantages and trains. The driver receives metrics only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from train_embodied.batches import Prediction
from train_embodied.rollout import RolloutBatch, pad_time
from vla_models import concat_forward_inputs, pad_prompts


@dataclass
class TrajectoryPiece:
    """The model side of some env rows of one rollout, as one rollout rank recorded them.

    Attributes:
        rows: int64 [n] global row ids (rollout index * num_envs + row).
        forward_inputs: what `policy.evaluate` needs, each tensor [T', n, ...] (T' decisions of that rollout).
        logprobs: float32 [T', n, C, A] token log-probs at sampling time.
        values: float32 [T', n] values at sampling time, or None without a value head.
    """

    rows: np.ndarray
    forward_inputs: dict[str, torch.Tensor]
    logprobs: torch.Tensor
    values: torch.Tensor | None


@dataclass
class RolloutShard:
    """The env side of an iteration's rollouts, one row per env row (batch-major: a split along dim 0 gives a rank
    whole rows). `split_unit` rows (a GRPO group) always go to one rank.

    Attributes:
        rows: int64 [B] global row ids.
        rewards: float32 [B, T, C].
        terminated, truncated: bool [B, T, C].
        final_values: float32 [B, T] V(final observation) of episodes truncated at decision t, else 0.
        loss_mask: bool [B, T] decisions inside an episode.
        last_values: float32 [B] V(obs after the last decision).
        split_unit: rows that must stay on one rank.
        task_ids: int64 [B] each row's task (`RolloutBatch.task_ids`), None where the rollout did not record it.
    """

    rows: np.ndarray
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_values: torch.Tensor
    loss_mask: torch.Tensor
    last_values: torch.Tensor
    split_unit: int = 1
    task_ids: torch.Tensor | None = None


def rollout_rows(tc: Any, grouped: bool) -> tuple[int, int]:
    """(B, split_unit) of an iteration's rollouts under config `tc`: `env.train.num_envs` x
    `algorithm.rollout_epoch` rows; a group of `algorithm.group_size` rows with grouped starts (GRPO), else 1."""
    return tc.env_train.num_envs * tc.algorithm.rollout_epoch, tc.algorithm.group_size if grouped else 1


def rollout_shard(batch: RolloutBatch, *, split_unit: int = 1) -> RolloutShard:
    """The env side of `batch` (time-major [T, B, ...]) as a batch-major `RolloutShard` of all its rows."""

    def rows_first(x: torch.Tensor) -> torch.Tensor:
        return x.transpose(0, 1).contiguous()

    return RolloutShard(
        rows=np.arange(batch.rewards.shape[1], dtype=np.int64),
        rewards=rows_first(batch.rewards),
        terminated=rows_first(batch.terminated),
        truncated=rows_first(batch.truncated),
        final_values=rows_first(batch.final_values),
        loss_mask=rows_first(batch.loss_mask),
        last_values=batch.last_values,
        split_unit=split_unit,
        task_ids=batch.task_ids,
    )


class TrajectoryRecorder:
    """A rollout rank's record of the decisions it took this iteration, by the rows it took them for.

    A rank sees the same rows at every decision of a rollout (one entry per pipeline stage and rollout)."""

    def __init__(self) -> None:
        self._steps: dict[tuple[int, ...], list[Prediction]] = {}

    def record(self, rows: np.ndarray, prediction: Prediction) -> None:
        """Keep the model side of one decision for global rows `rows` [n]."""
        self._steps.setdefault(tuple(int(r) for r in rows), []).append(prediction)

    def clear(self) -> None:
        self._steps.clear()

    def pieces(self, bounds: list[tuple[int, int]]) -> list[list[TrajectoryPiece]]:
        """The recorded rows split by owner: entry a holds the pieces of rows in `bounds[a]` = [start, stop)."""
        out: list[list[TrajectoryPiece]] = [[] for _ in bounds]
        for key, preds in self._steps.items():
            rows = np.asarray(key, dtype=np.int64)
            decisions = pad_prompts([p.forward_inputs for p in preds])  # widths differ across tasks
            fi = {k: torch.stack([d[k] for d in decisions]) for k in decisions[0]}
            logprobs = torch.stack([p.logprobs for p in preds])
            values = None if preds[0].values is None else torch.stack([p.values for p in preds])
            for a, (start, stop) in enumerate(bounds):
                keep = np.flatnonzero((rows >= start) & (rows < stop))
                if len(keep) == 0:
                    continue
                cols = torch.as_tensor(keep)
                out[a].append(
                    TrajectoryPiece(
                        rows=rows[keep],
                        forward_inputs={k: v.index_select(1, cols) for k, v in fi.items()},
                        logprobs=logprobs.index_select(1, cols),
                        values=None if values is None else values.index_select(1, cols),
                    )
                )
        return out


def assemble_rollout(shard: RolloutShard, pieces: list[TrajectoryPiece]) -> RolloutBatch:
    """This rank's rows as a time-major `RolloutBatch`: the env side of `shard` and the model side of `pieces`
    (a rollout shorter than T, grouped starts that all ended early, is padded with masked-out zeros as
    `concat_rollouts` pads it).

    Raises:
        ValueError: the pieces do not cover the shard's rows exactly once (a lost or duplicated piece).
    """
    t = shard.rewards.shape[1]
    rows = np.concatenate([p.rows for p in pieces]) if pieces else np.zeros(0, np.int64)
    if sorted(rows.tolist()) != sorted(shard.rows.tolist()):
        raise ValueError(
            f"the trajectory pieces hold rows {sorted(rows.tolist())} but this actor rank trains on rows "
            f"{shard.rows.tolist()}: a rollout rank's record was lost or sent twice"
        )
    order = torch.as_tensor(np.argsort(rows, kind="stable"))
    fi = concat_forward_inputs(
        [{k: pad_time(v, t) for k, v in p.forward_inputs.items()} for p in pieces], dim=1
    )
    values = None if pieces[0].values is None else torch.cat([pad_time(p.values, t) for p in pieces], dim=1)

    def time_first(x: torch.Tensor) -> torch.Tensor:
        return x.transpose(0, 1).contiguous()

    return RolloutBatch(
        forward_inputs={k: v.index_select(1, order) for k, v in fi.items()},
        logprobs=torch.cat([pad_time(p.logprobs, t) for p in pieces], dim=1).index_select(1, order),
        values=None if values is None else values.index_select(1, order),
        rewards=time_first(shard.rewards),
        terminated=time_first(shard.terminated),
        truncated=time_first(shard.truncated),
        final_values=time_first(shard.final_values),
        loss_mask=time_first(shard.loss_mask),
        last_values=shard.last_values,
        task_ids=shard.task_ids,
    )
