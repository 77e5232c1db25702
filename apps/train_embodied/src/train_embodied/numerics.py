"""NaN/inf guards of the update: a non-finite loss, gradient or advantage skips that update instead of writing
NaN into the weights (and from there into every later rollout); a run of them ends the run with one message.

- `finite_optimizer_step`: per minibatch, the optimizer steps only when the (clipped) gradient norm and the
  loss are finite; otherwise the gradients are dropped and the minibatch counts as skipped.
- `nonfinite_inputs`: per update, the rollout tensors the update would read (advantages, returns, old
  log-probs, old values) that hold NaN/inf; the runner skips the whole update when there are any.
- `first_nonfinite_weight`: after an update, the first parameter holding NaN/inf (a finite loss and gradient can
  still step a weight past the float range, e.g. with a huge learning rate); the runner stops before that state
  is saved or sent to the rollout.
- `SkippedUpdates`: counts consecutive skipped updates and raises `TrainingDiverged` at the limit
  (`runner.max_consecutive_skipped_updates`).
"""

from __future__ import annotations

import math

import torch

from train_embodied.batches import SampleBatch

#: Metric: fraction of this update's minibatches whose optimizer step was skipped (non-finite loss or gradients).
SKIPPED_MINIBATCHES = "train/skipped_minibatch_fraction"
#: Metric: 1.0 when the whole update was skipped (non-finite inputs, or every minibatch skipped).
SKIPPED_UPDATE = "train/skipped_update"
#: Metric: 1.0 when the update's last minibatch was skipped after earlier ones stepped: its loss, non-finite, is
#: that of the weights the update ends with, so those weights are not to be saved or sampled with.
NONFINITE_FINAL_LOSS = "train/nonfinite_final_loss"

_CHECKED_INPUTS = ("advantages", "returns", "old_logprobs", "old_values")


class TrainingDiverged(RuntimeError):
    """Too many updates in a row were skipped for NaN/inf; the message is one line saying what and where."""


def finite_optimizer_step(
    optimizer: torch.optim.Optimizer, grad_norm: torch.Tensor | float, metrics: dict[str, float]
) -> bool:
    """Step `optimizer` if `grad_norm` and the loss in `metrics` are finite, else drop the gradients.

    Adds `SKIPPED_MINIBATCHES` (1.0 or 0.0) to `metrics` (the caller averages it over minibatches). Every rank sees
    the same all-reduced gradient norm, so sharded ranks agree on skipping.
    """
    loss = metrics.get("train/loss", 0.0)
    finite = math.isfinite(float(grad_norm)) and math.isfinite(float(loss))
    if finite:
        optimizer.step()
    else:
        optimizer.zero_grad(set_to_none=True)
    metrics[SKIPPED_MINIBATCHES] = 0.0 if finite else 1.0
    return finite


def nonfinite_inputs(samples: SampleBatch) -> list[str]:
    """Names of the update's input tensors (advantages, returns, old log-probs/values) holding NaN/inf, with
    how many entries, e.g. `["advantages (3 of 256)"]`; masked-out rows are not checked."""
    mask = samples.mask
    bad = []
    for name in _CHECKED_INPUTS:
        value = getattr(samples, name)
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            continue
        rows = value[mask] if isinstance(mask, torch.Tensor) and mask.shape[0] == value.shape[0] else value
        count = int((~torch.isfinite(rows)).sum())
        if count:
            bad.append(f"{name} ({count} of {rows.numel()})")
    return bad


def nonfinite_loss_terms(metrics: dict[str, float]) -> list[str]:
    """The loss terms of `metrics` (`train/...loss` keys) that are NaN/inf, as `key=value`."""
    return [f"{k}={v}" for k, v in metrics.items() if k.endswith("loss") and not math.isfinite(v)]


def first_nonfinite_weight(module: torch.nn.Module) -> str | None:
    """The first parameter of `module` holding NaN/inf, as `name (k of n entries)`, else None. A sharded parameter
    is checked on this rank's shard (the caller gathers the ranks' answers)."""
    for name, param in module.named_parameters():
        local = param.to_local() if hasattr(param, "to_local") else param
        if not local.is_floating_point():
            continue
        bad = int((~torch.isfinite(local.detach())).sum())
        if bad:
            return f"{name} ({bad} of {local.numel()} entries)"
    return None


class SkippedUpdates:
    """Consecutive skipped updates; `record` raises TrainingDiverged once `limit` are skipped in a row."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_a_row = 0
        self.total = 0

    def record(self, iteration: int, skipped: bool, why: str) -> None:
        """Count iteration `iteration`'s update (skipped or not; `why` says what was non-finite)."""
        if not skipped:
            self.in_a_row = 0
            return
        self.in_a_row += 1
        self.total += 1
        print(
            f"[numerics] iteration {iteration}: update skipped: {why} ({self.in_a_row} in a row, limit {self.limit})"
        )
        if self.in_a_row >= self.limit:
            raise TrainingDiverged(
                f"{self.in_a_row} updates in a row (iterations {iteration - self.in_a_row + 1}-{iteration}) were skipped for "
                f"NaN/inf (last: {why}); the run stops here (runner.max_consecutive_skipped_updates="
                f"{self.limit}): lower actor.optim.lr, check the rewards, or resume from an earlier checkpoint"
            )
