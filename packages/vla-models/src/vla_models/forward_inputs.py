"""Joining the ``forward_inputs`` of several ``predict`` calls (rollout steps, minibatches) into one batch."""

from __future__ import annotations

from collections.abc import Mapping

import torch

PROMPT_KEYS: tuple[str, ...] = ("input_ids", "text_mask")
"""``forward_inputs`` keys whose last dim is the prompt width (left-padded; the padding is masked out)."""


def pad_prompts(
    batches: list[Mapping[str, torch.Tensor]], *, pad_token_id: int = 0
) -> list[dict[str, torch.Tensor]]:
    """``forward_inputs`` of several ``predict`` calls with their prompts (:data:`PROMPT_KEYS`, last dim)
    left-padded to the widest, so they join along any other dim. The padding is masked out of attention, so any
    valid token id serves as ``pad_token_id``; values agree up to float rounding (set ``prompt_length`` in the
    config for bit-identical widths)."""
    widths = {b["input_ids"].shape[-1] for b in batches if "input_ids" in b}
    if len(widths) <= 1:
        return [dict(b) for b in batches]
    width = max(widths)
    out = []
    for fi in batches:
        padded = dict(fi)
        for k in PROMPT_KEYS:
            v = fi.get(k)
            if v is not None and v.shape[-1] < width:
                fill = pad_token_id if k == "input_ids" else False
                pad = torch.full((*v.shape[:-1], width - v.shape[-1]), fill, dtype=v.dtype, device=v.device)
                padded[k] = torch.cat([pad, v], dim=-1)
        out.append(padded)
    return out


def concat_forward_inputs(
    batches: list[Mapping[str, torch.Tensor]], *, pad_token_id: int = 0, dim: int = 0
) -> dict[str, torch.Tensor]:
    """Concatenate ``forward_inputs`` of several ``predict`` calls along ``dim`` (the batch; 1 for rollouts
    stacked [T, B, ...]), prompts left-padded to the widest (:func:`pad_prompts`)."""
    padded = pad_prompts(batches, pad_token_id=pad_token_id)
    return {k: torch.cat([b[k] for b in padded], dim=dim) for k in padded[0]}
