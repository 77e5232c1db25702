"""The actor -> rollout weight protocol, with a version number.

:class:`WeightSync` is one worker's end of it: every actor rank holds a sender side, every rollout rank a
receiver side; :class:`WeightSenderWorker` / :class:`WeightReceiverWorker` are worker base classes that expose it
as the methods the driver calls. :class:`WeightSyncCoordinator` is the driver's part: it tells both worker groups
when to (re)build their group and which version to send, and re-syncs a rollout rank that was replaced. Weights
never pass through the driver, only version numbers do.

The parts underneath:

- :class:`WeightSender` / :class:`WeightReceiver` (``update``): a :class:`WeightUpdate` (version + name -> tensor)
  built from the actor's weights, applied in place to the rollout model. Versions increase; a receiver refuses an
  update that is not newer than what it holds (:class:`StaleWeightsError`).
- :class:`PeerGroup` (``peer_group``): a process group of its own between the actor's sending rank and the rollout
  ranks (its own TCP store), so data-parallel actor ranks keep their default (FSDP) group and rollout processes
  join only this one.
- :class:`TorchDistributedTransport` (``transport``): broadcasts an update over a :class:`PeerGroup` (gloo on the
  CPU, NCCL on GPUs). Tensors travel as raw bytes in buckets, so every dtype is sent bit-exactly in a few
  collectives; the metadata travels as JSON bytes (nothing is unpickled). A sharded (FSDP2) tensor is gathered
  just before its bucket goes out; the actor ranks that do not send join those gathers
  (:class:`ShardGatherFollower`).
"""

from __future__ import annotations

from vla_infra.weight_sync.coordinator import WeightSyncCoordinator
from vla_infra.weight_sync.endpoint import WeightSync
from vla_infra.weight_sync.peer_group import PeerGroup
from vla_infra.weight_sync.transport import ShardGatherFollower, TorchDistributedTransport, bucket_indices
from vla_infra.weight_sync.update import (
    StaleWeightsError,
    WeightReceiver,
    WeightSender,
    WeightUpdate,
)
from vla_infra.weight_sync.worker_bases import WeightReceiverWorker, WeightSenderWorker

__all__ = [
    "PeerGroup",
    "ShardGatherFollower",
    "StaleWeightsError",
    "TorchDistributedTransport",
    "WeightReceiver",
    "WeightReceiverWorker",
    "WeightSender",
    "WeightSenderWorker",
    "WeightSync",
    "WeightSyncCoordinator",
    "WeightUpdate",
    "bucket_indices",
]
