"""Action / proprio (un)normalisation with a checkpoint's dataset statistics (OpenVLA's BOUNDS_Q99 scheme).

``norm_stats`` has the layout of OpenVLA's ``dataset_statistics.json``::

    {unnorm_key: {"action": {"q01": [...], "q99": [...], "mask": [...], ...}, "proprio": {...}}}

Masked dimensions map ``[-1, 1] <-> [q01, q99]``; unmasked ones (e.g. the gripper) pass through unchanged.
"""

from __future__ import annotations

from typing import Any

import torch


def select_unnorm_key(norm_stats: dict[str, Any] | None, unnorm_key: str | None) -> str | None:
    """Resolve which dataset's statistics to use.

    Returns ``None`` when there are no statistics (actions stay in ``[-1, 1]``). With several datasets and no
    ``unnorm_key`` this fails, naming the available keys.
    """
    if not norm_stats:
        if unnorm_key is not None:
            raise ValueError(
                f"unnorm_key={unnorm_key!r} was given but the checkpoint has no dataset statistics"
            )
        return None
    if unnorm_key is None:
        if len(norm_stats) != 1:
            raise ValueError(
                f"unnorm_key is required: the checkpoint has statistics for {sorted(norm_stats)}"
            )
        return next(iter(norm_stats))
    if unnorm_key not in norm_stats:
        raise ValueError(
            f"unnorm_key={unnorm_key!r} is not in the dataset statistics; allowed: {sorted(norm_stats)}"
        )
    return unnorm_key


class BoundsNormalizer:
    """``[q01, q99] <-> [-1, 1]`` per dimension, only where ``mask`` is True.

    Args:
        q01: low bound per dimension ``[D]``.
        q99: high bound per dimension ``[D]``.
        mask: which dimensions are normalised ``[D]`` (default all).
        eps: added to ``q99 - q01`` in both directions (OpenVLA-OFT: 1e-8; OpenVLA: 0).
    """

    def __init__(self, *, q01: Any, q99: Any, mask: Any | None = None, eps: float = 0.0) -> None:
        self.eps = float(eps)
        self.low = torch.as_tensor(q01, dtype=torch.float32).flatten()
        self.high = torch.as_tensor(q99, dtype=torch.float32).flatten()
        if self.low.shape != self.high.shape:
            raise ValueError(f"q01 {tuple(self.low.shape)} and q99 {tuple(self.high.shape)} differ in shape")
        m = (
            torch.ones_like(self.low, dtype=torch.bool)
            if mask is None
            else torch.as_tensor(mask).bool().flatten()
        )
        if m.shape != self.low.shape:
            raise ValueError(f"mask {tuple(m.shape)} does not match q01 {tuple(self.low.shape)}")
        self.mask = m

    @property
    def dim(self) -> int:
        return int(self.low.numel())

    @property
    def constant_dims(self) -> torch.Tensor:
        """bool ``[D]``: the normalised dimensions with ``q01 == q99``, which un-normalise to one value whatever
        the input (to within ``eps``)."""
        return self.mask & (self.high == self.low)

    def _check(self, x: torch.Tensor, what: str) -> None:
        if x.shape[-1] != self.dim:
            raise ValueError(f"{what} last dim {x.shape[-1]} does not match the statistics' dim {self.dim}")

    def unnormalize(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., D]`` in ``[-1, 1]`` -> env units (float32)."""
        self._check(x, "normalised input")
        low, high, mask = (t.to(x.device) for t in (self.low, self.high, self.mask))
        out = 0.5 * (x.float() + 1.0) * (high - low + self.eps) + low
        return torch.where(mask, out, x.float())

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., D]`` env units -> ``[-1, 1]`` (clipped; float32)."""
        self._check(x, "input")
        low, high, mask = (t.to(x.device) for t in (self.low, self.high, self.mask))
        out = 2.0 * (x.float() - low) / (high - low + self.eps).clamp_min(1e-8) - 1.0
        return torch.where(mask, out, x.float()).clamp(-1.0, 1.0)


def normalizer_for(
    norm_stats: dict[str, Any] | None,
    key: str | None,
    field: str,
    *,
    normalization_type: str = "bounds_q99",
    eps: float = 0.0,
) -> BoundsNormalizer | None:
    """The normaliser of ``norm_stats[key][field]`` (``"action"`` or ``"proprio"``), or None if absent.

    ``normalization_type`` "bounds_q99" maps ``[q01, q99]``, "bounds" maps ``[min, max]`` onto ``[-1, 1]``.
    """
    if key is None or not norm_stats:
        return None
    entry = norm_stats[key].get(field)
    if entry is None:
        return None
    low, high = {"bounds_q99": ("q01", "q99"), "bounds": ("min", "max")}[normalization_type]
    for name in (low, high):
        if name not in entry:
            raise ValueError(
                f"normalization_type={normalization_type!r} needs {field}.{name} in the statistics of {key!r}; "
                f"they have {sorted(entry)}"
            )
    return BoundsNormalizer(q01=entry[low], q99=entry[high], mask=entry.get("mask"), eps=eps)


def stats_from_bounds(low: Any, high: Any, *, key: str = "env") -> dict[str, Any]:
    """Dataset statistics that map ``[-1, 1]`` onto an env's action box ``[low, high]`` (all dims masked)."""
    low_t = torch.as_tensor(low, dtype=torch.float32).flatten().tolist()
    high_t = torch.as_tensor(high, dtype=torch.float32).flatten().tolist()
    mask = [True] * len(low_t)
    return {key: {"action": {"q01": low_t, "q99": high_t, "min": low_t, "max": high_t, "mask": mask}}}


def dataset_statistics(
    actions: Any, *, proprio: Any | None = None, key: str = "demos", min_range: float = 1e-2
) -> dict[str, Any]:
    """OpenVLA's ``dataset_statistics.json`` of a dataset (``mean``, ``std``, ``min``, ``max``, ``q01``, ``q99``,
    ``mask`` per field; every dimension masked), as OpenVLA-OFT computes it for fine-tuning data.

    A dimension whose ``[q01, q99]`` is narrower than ``min_range`` (a joint the data never moves) gets that range,
    centred on it, so that normalising a value off it stays finite.

    Args:
        actions: ``[N, A]`` (or ``[..., A]``) actions.
        proprio: ``[N, D]`` proprio states, or None.
    """
    out: dict[str, Any] = {}
    for field, values in (("action", actions), ("proprio", proprio)):
        if values is None:
            continue
        x = torch.as_tensor(values, dtype=torch.float64).reshape(-1, torch.as_tensor(values).shape[-1])
        q01, q99 = torch.quantile(x, 0.01, dim=0), torch.quantile(x, 0.99, dim=0)
        centre, half = (q01 + q99) / 2, torch.clamp((q99 - q01) / 2, min=min_range / 2)
        out[field] = {
            "mean": x.mean(0).tolist(),
            "std": x.std(0, unbiased=False).tolist(),
            "min": x.min(0).values.tolist(),
            "max": x.max(0).values.tolist(),
            "q01": (centre - half).tolist(),
            "q99": (centre + half).tolist(),
            "mask": [True] * x.shape[1],
        }
    return {key: out}
