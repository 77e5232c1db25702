"""A versioned weight update: built from the actor's model (:class:`WeightSender`), applied in place to the rollout's
(:class:`WeightReceiver`). Versions increase; a receiver refuses an update that is not newer than what it holds
(:class:`StaleWeightsError`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


class StaleWeightsError(RuntimeError):
    """An update (or a rollout about to generate) does not hold the weight version it must."""


@dataclass(frozen=True)
class WeightUpdate:
    """One sync message.

    Attributes:
        version: version of the weights after applying this update (>= 1).
        tensors: name -> tensor (CPU or device; a sharded tensor is gathered when it is sent).
    """

    version: int
    tensors: dict[str, torch.Tensor]

    @property
    def num_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


class WeightSender:
    """Actor side: builds versioned updates from the model's weights.

    Every actor rank builds an update of its tensors as they are: a sharded (FSDP2) policy's tensors are DTensors,
    which the source rank's :class:`TorchDistributedTransport` and the other ranks' :class:`ShardGatherFollower`
    gather one at a time just before its bucket is sent, so no rank ever holds the full weights.
    ``trainable_only=True`` restricts an update to the parameters with ``requires_grad`` (e.g. LoRA adapters).
    """

    def __init__(self, model: nn.Module, *, trainable_only: bool = False) -> None:
        self.model = model
        self.trainable_only = trainable_only
        self.version = 0

    def build_update(self, version: int | None = None) -> WeightUpdate:
        """Snapshot the current weights into an update.

        Args:
            version: The update's version when the caller numbers them (a trainer whose run resumes at some
                version); must be newer than the previous update's. Default: the previous one + 1.
        """
        if version is not None and version <= self.version:
            raise StaleWeightsError(
                f"version {version} is not newer than the last sent version {self.version}"
            )
        state = {k: v.detach() for k, v in self.model.state_dict().items()}
        if self.trainable_only:
            trainable = {name for name, p in self.model.named_parameters() if p.requires_grad}
            state = {k: v for k, v in state.items() if k in trainable}
        self.version = self.version + 1 if version is None else version
        return WeightUpdate(version=self.version, tensors=state)


class WeightReceiver:
    """Rollout side: applies updates in place and tracks the version it holds (0 = never synced)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.version = 0

    @torch.no_grad()
    def apply(self, update: WeightUpdate) -> int:
        """Copy the update's tensors into the model (cast to the model's dtype/device); returns the new version.

        Raises:
            StaleWeightsError: the update is not newer than the held version.
            KeyError / ValueError: a name the model does not have, or a shape mismatch.
        """
        if update.version <= self.version:
            raise StaleWeightsError(
                f"update version {update.version} is not newer than held version {self.version}"
            )
        targets = self.model.state_dict(keep_vars=True)
        for name, src in update.tensors.items():
            dst = targets.get(name)
            if dst is None:
                raise KeyError(f"weight update has tensor {name!r} that the rollout model does not have")
            if dst.shape != src.shape:
                raise ValueError(
                    f"shape mismatch for {name!r}: update {tuple(src.shape)} vs model {tuple(dst.shape)}"
                )
            if src.data_ptr() != dst.data_ptr():  # else the transport already wrote it in place
                dst.data.copy_(src)
        self.version = update.version
        return self.version
