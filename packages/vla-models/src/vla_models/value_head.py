"""Critic head for PPO: an MLP on the LM hidden state at the position that predicts the first action token."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

#: Activations of the critic MLP's hidden layers, by name.
ACTIVATIONS: dict[str, type[nn.Module]] = {"gelu": nn.GELU, "relu": nn.ReLU, "tanh": nn.Tanh}


class ValueHead(nn.Module):
    """``Linear -> act -> ... -> Linear(1)``; the last layer starts at zero so initial values are 0.

    Args:
        input_dim: hidden size of the language model.
        hidden_sizes: widths of the hidden layers (RLinf uses ``(512, 128)``).
        activation: the hidden layers' activation (``ACTIVATIONS``): GELU for OpenVLA's critic, ReLU for the
            pi0 / pi0.5 critic of the reference framework.
    """

    def __init__(
        self, input_dim: int, *, hidden_sizes: Sequence[int] = (512, 128), activation: str = "gelu"
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"value head activation={activation!r} is not supported; allowed: {sorted(ACTIVATIONS)}"
            )
        layers: list[nn.Module] = []
        dim = input_dim
        for width in hidden_sizes:
            layers += [nn.Linear(dim, width), ACTIVATIONS[activation]()]
            dim = width
        last = nn.Linear(dim, 1)
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        layers.append(last)
        self.mlp = nn.Sequential(*layers)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """``[B, H]`` -> values ``[B]`` (float32)."""
        return self.mlp(hidden).squeeze(-1).float()
