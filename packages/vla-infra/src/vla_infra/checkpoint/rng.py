"""The RNG states an exact resume restores: python ``random``, numpy, torch CPU and every CUDA device."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import torch


def capture_rng_state() -> dict[str, Any]:
    """RNG states of python ``random``, numpy, torch CPU and (if present) every CUDA device."""
    import numpy as np

    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`capture_rng_state` captured (CUDA states only if CUDA is available)."""
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
