"""OpenVLA-OFT's L1-regression action head: an MLP-ResNet from the slot hidden states to continuous actions.

Names match the official state dict (``model.layer_norm1``, ``model.fc1``, ``model.mlp_resnet_blocks.i.ffn``,
``model.layer_norm2``, ``model.fc2``), so the ``action_head--<step>_checkpoint.pt`` side file loads directly.
"""

from __future__ import annotations

import torch
from torch import nn


class MLPResNetBlock(nn.Module):
    """``x + ReLU(Linear(LayerNorm(x)))``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.ffn = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ffn(x)


class MLPResNet(nn.Module):
    """LayerNorm -> fc1 -> ReLU -> blocks -> LayerNorm -> fc2."""

    def __init__(self, *, num_blocks: int, input_dim: int, hidden_dim: int, output_dim: int) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(input_dim)
        self.fc1 = nn.Linear(input_dim, hidden_dim)
        self.relu = nn.ReLU()
        self.mlp_resnet_blocks = nn.ModuleList(MLPResNetBlock(hidden_dim) for _ in range(num_blocks))
        self.layer_norm2 = nn.LayerNorm(hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, output_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.fc1(self.layer_norm1(x)))
        for block in self.mlp_resnet_blocks:
            x = block(x)
        return self.fc2(self.layer_norm2(x))


class L1RegressionActionHead(nn.Module):
    """Slot hidden states ``[B, C*A, H]`` -> normalised actions ``[B, C, A]`` (not clipped).

    The ``A`` consecutive slots of a chunk are concatenated (``[B, C, A*H]``) and mapped to that chunk's ``A``
    values, as OpenVLA-OFT does.
    """

    def __init__(self, *, hidden_size: int, action_dim: int, num_blocks: int = 2) -> None:
        super().__init__()
        self.action_dim = action_dim
        self.model = MLPResNet(
            num_blocks=num_blocks,
            input_dim=hidden_size * action_dim,
            hidden_dim=hidden_size,
            output_dim=action_dim,
        )

    def forward(self, slot_hidden: torch.Tensor, num_action_chunks: int) -> torch.Tensor:
        b = slot_hidden.shape[0]
        x = slot_hidden.reshape(b, num_action_chunks, -1)
        return self.model(x.to(self.model.fc1.weight.dtype)).float()
