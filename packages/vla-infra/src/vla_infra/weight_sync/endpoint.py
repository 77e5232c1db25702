"""One worker's end of the actor -> rollout weight protocol (:class:`WeightSync`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch
from torch import nn

from vla_infra.weight_sync.peer_group import PeerGroup
from vla_infra.weight_sync.transport import ShardGatherFollower, TorchDistributedTransport
from vla_infra.weight_sync.update import StaleWeightsError, WeightReceiver, WeightSender

Side = Literal["sender", "receiver"]


class WeightSync:
    """One worker's end of the actor -> rollout weight protocol.

    Every actor rank holds a sender side (``WeightSync.sender``), every rollout rank a receiver side
    (``WeightSync.receiver``). Between separate processes the actor's rank 0 and the rollout ranks form a
    :class:`PeerGroup` (member 0 the sender, member ``1 + r`` rollout rank ``r``): the sender's rank 0 names the
    place (:meth:`endpoint`), every member :meth:`join` s at once, then each sync is :meth:`send` on every actor
    rank and :meth:`receive` on every rollout rank at the same time. When actor and rollout share one process
    the receiver takes the actor's state dict straight (:meth:`load`).

    The first send over a newly joined group carries every tensor; after it, a model with frozen parameters (LoRA,
    a frozen backbone) sends only its trainable ones, which alone can change. A receiver joining a new group
    accepts that first full send even of the version it holds already (the re-sync of a replaced rollout rank
    resends the current version to every rank).

    Args:
        model: The actor's policy (a sharded one streams: each tensor is gathered only when its bucket is sent,
            the actor ranks other than 0 join those gathers) or the rollout's policy.
        side: ``"sender"`` (actor) or ``"receiver"`` (rollout).
        rank: This worker's rank in its group.
        host: (sender) The address of this rank's node, where the group's store listens (loopback on one
            machine).
        timeout_s: How long joining and each transfer wait for the other members.
    """

    def __init__(
        self, model: nn.Module, *, side: Side, rank: int, host: str = "127.0.0.1", timeout_s: float = 600.0
    ) -> None:
        if side not in ("sender", "receiver"):
            raise ValueError(f"side={side!r}; allowed: 'sender', 'receiver'")
        self.model, self.side, self.rank, self.host, self.timeout_s = model, side, rank, host, timeout_s
        self.version = -1  # the version this side sent last / holds (-1: none yet)
        self._sender: WeightSender | None = None
        self._receiver: WeightReceiver | None = None
        self._transport: TorchDistributedTransport | ShardGatherFollower | None = None

    @classmethod
    def sender(cls, model: nn.Module, *, rank: int, host: str = "127.0.0.1", **kwargs: Any) -> WeightSync:
        return cls(model, side="sender", rank=rank, host=host, **kwargs)

    @classmethod
    def receiver(cls, model: nn.Module, *, rank: int, **kwargs: Any) -> WeightSync:
        return cls(model, side="receiver", rank=rank, **kwargs)

    def endpoint(self) -> tuple[str, int]:
        """(Sender rank 0) The address of this node and a free port there: where the peer group meets."""
        from vla_infra.workers.worker import find_free_port

        return self.host, find_free_port(self.host)

    def join(self, host: str, port: int, world_size: int, backend: str = "gloo") -> None:
        """Join a new peer group of ``world_size`` members at ``host:port`` (every member calls it at once; the
        sender's rank 0 is member 0, rollout rank ``r`` member ``1 + r``, the other actor ranks only join the
        gathers of a sharded model). The next send is a full one."""
        self._transport = None  # the old group (if any) is dropped first
        if self.side == "sender":
            self._sender = WeightSender(self.model)
            self._transport = ShardGatherFollower()
            if self.rank != 0:
                return
        else:
            self._receiver = WeightReceiver(self.model)
        member = 0 if self.side == "sender" else 1 + self.rank
        peers = PeerGroup(
            host, port, rank=member, world_size=world_size, backend=backend, timeout_s=self.timeout_s
        )
        self._transport = TorchDistributedTransport(peers)

    def send(self, version: int) -> None:
        """(Every actor rank, a collective when the model is sharded) Send the weights as ``version``.

        Raises:
            StaleWeightsError: ``version`` is not newer than the last one sent over this group.
            RuntimeError: :meth:`join` was not called.
        """
        if self.side != "sender" or self._sender is None:
            raise RuntimeError("send() needs the sender side, joined to a peer group (join)")
        sender = self._sender
        sender.trainable_only = sender.version > 0 and any(
            not p.requires_grad for p in self.model.parameters()
        )
        try:
            update = sender.build_update(version=int(version))
            if self._transport is not None:
                self._transport.send(update)
        except Exception:
            self._transport = None  # closes this end: receivers waiting for the update fail fast
            raise
        self.version = int(version)

    def receive(self, version: int) -> dict[str, int]:
        """(Every rollout rank) Receive ``version`` from the sender and apply it in place.

        Returns:
            ``tensors`` and ``bytes`` received.

        Raises:
            StaleWeightsError: the update that arrives is not ``version`` (a missed or repeated sync), or not newer
                than what this side holds since it joined.
        """
        if self.side != "receiver" or self._receiver is None or self._transport is None:
            raise RuntimeError("receive() needs the receiver side, joined to a peer group (join)")
        assert isinstance(self._transport, TorchDistributedTransport)
        update = self._transport.recv(
            self.model.state_dict(keep_vars=True),
            held_version=self._receiver.version,
            expected_version=version,
        )
        if update.version != version:
            raise StaleWeightsError(
                f"rollout rank {self.rank} expected weight version {version}, received {update.version}"
            )
        self._receiver.apply(update)
        self.version = int(version)
        return {"tensors": len(update.tensors), "bytes": update.num_bytes}

    @torch.no_grad()
    def load(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """(Receiver, actor and rollout in one process) Copy the actor's state dict in as ``version``."""
        if self.side != "receiver":
            raise RuntimeError("load() is the receiver side's")
        self.model.load_state_dict(state_dict)
        self.version = int(version)

    def check_version(self, run_version: int | None) -> None:
        """(Receiver) Refuse to generate with other weights than the run's last synced ``run_version``.

        Raises:
            StaleWeightsError: this rank holds another version (None: no check).
        """
        if run_version is not None and self.version != run_version:
            raise StaleWeightsError(
                f"rollout rank {self.rank} holds weight version {self.version} but the run is at version "
                f"{run_version}: it refuses to generate with other weights than the actor's (sync it first)"
            )
