"""Where each part of a Prismatic policy's sequence sits, and what each position may attend to.

Every row has the same length, so action slots sit at the same indices::

    [BOS] [image tokens x N_img] [proprio token?] [prompt tokens, left-padded] [action slots x C*A] [STOP?]

Padding sits inside the row; it is masked out of attention and position ids count only real tokens, which is
equivalent to an unpadded row. OpenVLA fills the slots with the chosen action tokens (teacher forcing, causal)
and reads position ``t - 1`` for slot ``t``. OFT fills them with zero (or learned) placeholders; how they
attend and where they are read depends on ``implement_version`` (see ``OpenVLAOFTPolicy``). The value head
reads the position just before the first slot.
"""

from __future__ import annotations

import torch


def build_attention_mask(key_valid: torch.Tensor, num_slots: int, *, bidirectional: bool) -> torch.Tensor:
    """Boolean ``[B, 1, T, T]`` mask: causal over valid keys; the last ``num_slots`` positions also see each
    other when ``bidirectional``. Every query sees itself (no empty rows for padding)."""
    t = key_valid.shape[1]
    idx = torch.arange(t, device=key_valid.device)
    allowed = idx[None, :] <= idx[:, None]
    if bidirectional and num_slots > 0:
        slot = idx >= t - num_slots
        allowed = allowed | (slot[:, None] & slot[None, :])
    mask = allowed[None] & key_valid[:, None, :]
    mask = mask | torch.eye(t, dtype=torch.bool, device=key_valid.device)[None]
    return mask[:, None]


def full_attention_mask(key_valid: torch.Tensor) -> torch.Tensor:
    """Boolean ``[B, 1, T, T]`` mask: every position sees every valid key (OpenVLA-OFT's bidirectional
    attention); padding positions see only themselves."""
    t = key_valid.shape[1]
    eye = torch.eye(t, dtype=torch.bool, device=key_valid.device)[None]
    return (key_valid[:, None, :].expand(-1, t, -1) | eye)[:, None]


def position_ids_from(key_valid: torch.Tensor) -> torch.Tensor:
    return (key_valid.long().cumsum(-1) - 1).clamp_min(0)
