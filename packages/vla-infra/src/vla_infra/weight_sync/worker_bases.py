"""Worker base classes that hold one end of the weight protocol each: the registered methods
:class:`~vla_infra.weight_sync.coordinator.WeightSyncCoordinator` calls on the actor group
(:class:`WeightSenderWorker`) and on the rollout group (:class:`WeightReceiverWorker`).

A subclass builds ``self.weight_sync`` in its ``__init__`` (``WeightSync.sender`` / ``WeightSync.receiver``) and,
when its model may sit in host memory between calls (``enable_offload``), overrides :meth:`_weights_on_device`.
The actor's subclass also answers ``state_dict()`` with full CPU tensors (the sync of actor and rollout in one
process reads it).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext

import torch

from vla_infra.weight_sync.endpoint import WeightSync
from vla_infra.workers.dispatch import register
from vla_infra.workers.worker import Worker


class _WeightSyncWorker(Worker):
    weight_sync: WeightSync

    def _weights_on_device(self) -> AbstractContextManager[object]:
        """The block in which the model's weights must be on this worker's device (a transfer reads or writes
        them there); the default is a model that never leaves it."""
        return nullcontext()

    @register("one_to_all", collect="none")
    def join_weight_sync(self, host: str, port: int, world_size: int, backend: str) -> None:
        """Join a new peer group of ``world_size`` members at ``host:port`` (every member at once)."""
        self.weight_sync.join(host, port, world_size, backend)


class WeightSenderWorker(_WeightSyncWorker):
    """The actor's end: every rank holds a ``WeightSync.sender``; rank 0 names where the peer group meets."""

    @register("rank_zero")
    def weight_sync_endpoint(self) -> tuple[str, int]:
        """This node's address and a free port there: where the peer group meets."""
        return self.weight_sync.endpoint()

    @register("one_to_all", collect="none")
    def send_weights(self, version: int) -> None:
        """Send the weights as ``version`` (a collective over the actor ranks when the model is sharded)."""
        with self._weights_on_device():
            self.weight_sync.send(version)


class WeightReceiverWorker(_WeightSyncWorker):
    """The rollout's end: every rank holds a ``WeightSync.receiver`` and refuses to generate with another version
    than the run's (``self.weight_sync.check_version``)."""

    @register("one_to_all", collect="none", replay=True)
    def load_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Weight sync in one process (local backend): copy the actor's state dict into the model."""
        with self._weights_on_device():
            self.weight_sync.load(state_dict, version)

    # not replayed on a replacement (the coordinator re-syncs it), and not retried on one: the sender's group it
    # waits in is gone, so the driver syncs again from the start
    @register("one_to_all", collect="first", restart=False)
    def receive_weights(self, version: int) -> dict[str, int]:
        """Receive ``version`` from the sender and apply it in place; the ``tensors`` and ``bytes`` received."""
        with self._weights_on_device():
            return self.weight_sync.receive(version)

    @register("one_to_all", collect="list")
    def weight_version(self) -> int:
        """The weight version this rank holds (-1: never synced)."""
        return self.weight_sync.version
