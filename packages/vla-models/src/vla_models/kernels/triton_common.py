"""What the fused Triton kernels (``triton_logits``, ``triton_hidden``) share: whether Triton interprets them on
the CPU, the action tile width and the incoming gradients.

Import the Triton modules only when Triton is wanted (``vla_models.kernels.api`` imports them on first use):
``TRITON_INTERPRET=1`` must be set before they are imported to run the kernels on CPU tensors (slowly; for tests),
because ``@triton.jit`` reads the flag at decoration time.
"""

from __future__ import annotations

import os

import torch
import triton

try:  # triton >= 3.4 reads its flags through `knobs`
    from triton import knobs

    INTERPRET = bool(knobs.runtime.interpret)
except ImportError:  # pragma: no cover - older triton
    INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def action_tile(num_actions: int) -> int:
    """The tile width over the action ids: the next power of two, at least 16."""
    return max(16, triton.next_power_of_2(num_actions))


def grad_or_zeros(grad: torch.Tensor | None, n_rows: int, device: torch.device) -> torch.Tensor:
    """The incoming gradient of a per-row output as a contiguous fp32 ``[n_rows]`` (zeros when autograd gives None)."""
    if grad is None:
        return torch.zeros(n_rows, dtype=torch.float32, device=device)
    return grad.reshape(-1).float().contiguous()
