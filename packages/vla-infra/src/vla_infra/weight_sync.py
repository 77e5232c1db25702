"""The actor -> rollout weight protocol, with a version number.

:class:`WeightSync` is one worker's end of it: every actor rank holds a sender side, every rollout rank a
receiver side. :class:`WeightSyncCoordinator` is the driver's part: it tells both worker groups when to
(re)build their group and which version to send, and re-syncs a rollout rank that was replaced. Weights never
pass through the driver, only version numbers do.

The parts underneath:

- :class:`WeightSender` / :class:`WeightReceiver`: a :class:`WeightUpdate` (version + name -> tensor) built from the
  actor's weights, applied in place to the rollout model. Versions increase; a receiver refuses an update that
  is not newer than what it holds (:class:`StaleWeightsError`).
- :class:`PeerGroup`: a process group of its own between the actor's sending rank and the rollout ranks (its own
  TCP store), so data-parallel actor ranks keep their default (FSDP) group and rollout processes join only
  this one.
- :class:`TorchDistributedTransport`: broadcasts an update over a :class:`PeerGroup` (gloo on the CPU, NCCL on
  GPUs). Tensors travel as raw bytes in buckets, so every dtype is sent bit-exactly in a few collectives; the
  metadata travels as JSON bytes (nothing is unpickled). A sharded (FSDP2) tensor is gathered just before its
  bucket goes out; the actor ranks that do not send join those gathers (:class:`ShardGatherFollower`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.distributed as dist
from torch import nn

from vla_infra.rendezvous import tcp_store

if TYPE_CHECKING:
    from vla_infra.workers.group import WorkerGroup

__all__ = [
    "PeerGroup",
    "ShardGatherFollower",
    "StaleWeightsError",
    "TorchDistributedTransport",
    "WeightReceiver",
    "WeightSender",
    "WeightSync",
    "WeightSyncCoordinator",
    "WeightUpdate",
    "state_dicts_equal",
]


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


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.detach().to("cpu").reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


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


def bucket_indices(sizes: list[int], *, bucket_bytes: int, direct_bytes: int) -> list[list[int]]:
    """Group tensor indices for sending: small tensors packed up to ``bucket_bytes``, large ones
    (>= ``direct_bytes``) alone, so they travel from their own storage without a packing copy. Empty groups
    are dropped."""
    buckets: list[list[int]] = [[]]
    used = 0
    for i, size in enumerate(sizes):
        if size >= direct_bytes:
            buckets.extend([[i], []])
            used = 0
            continue
        if buckets[-1] and used + size > bucket_bytes:
            buckets.append([])
            used = 0
        buckets[-1].append(i)
        used += size
    return [b for b in buckets if b]


def _full(t: torch.Tensor) -> torch.Tensor:
    """A plain tensor: a sharded (DTensor) one is gathered first (a collective over its mesh)."""
    full_tensor = getattr(t, "full_tensor", None)
    return full_tensor() if callable(full_tensor) else t


def _num_bytes(t: torch.Tensor) -> int:
    return int(t.numel()) * t.element_size()  # a DTensor reports its global shape


class ShardGatherFollower:
    """The part a sharded actor rank other than the sender plays in a streamed send: it joins each tensor's
    gather in the same order as the sender's transport (same bucket sizes), and sends nothing."""

    collective = True

    def __init__(self, *, bucket_bytes: int = 256 << 20, direct_bytes: int = 1 << 20) -> None:
        self.bucket_bytes = bucket_bytes
        self.direct_bytes = direct_bytes

    def send(self, update: WeightUpdate) -> None:
        tensors = list(update.tensors.values())
        sizes = [_num_bytes(t) for t in tensors]
        for bucket in bucket_indices(sizes, bucket_bytes=self.bucket_bytes, direct_bytes=self.direct_bytes):
            for i in bucket:
                _full(tensors[i])


class PeerGroup:
    """A process group of its own between separate processes: the actor's sending rank and the rollout ranks.

    Rank 0 hosts a TCP store at ``host:port``; every member constructs the group at the same time (the call
    blocks until all ``world_size`` members joined). It does not touch ``torch.distributed``'s default group.

    Args:
        host, port: Rank 0's address (reachable by every member) and a free port there.
        rank, world_size: This member's rank and the number of members.
        backend: ``"gloo"`` (CPU tensors) or ``"nccl"`` (CUDA tensors).
        bind_host: Interface gloo binds on this member (default: ``host`` when it is a loopback address, so a
            single-machine group never listens beyond 127.0.0.1; else the machine's default interface).
        timeout_s: How long a collective or the rendezvous waits for the other members.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        rank: int,
        world_size: int,
        backend: str = "gloo",
        bind_host: str | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"backend={backend!r} is not supported; allowed: 'gloo', 'nccl'")
        timeout = timedelta(seconds=timeout_s)
        self.rank, self.world_size, self.backend = rank, world_size, backend
        # listens on `host`'s interface only (loopback on one machine)
        self.store = tcp_store(host, port, world_size, is_master=rank == 0, timeout=timeout)
        if backend == "gloo":
            opts = dist.ProcessGroupGloo._Options()
            if bind_host is None and host.startswith("127."):
                bind_host = host
            opts._devices = [
                dist.ProcessGroupGloo.create_device(hostname=bind_host)
                if bind_host
                else dist.ProcessGroupGloo.create_default_device()
            ]
            opts._timeout = timeout
            self.pg: dist.ProcessGroup = dist.ProcessGroupGloo(self.store, rank, world_size, opts)
        else:
            nccl_opts = dist.ProcessGroupNCCL.Options()
            nccl_opts._timeout = timeout
            self.pg = dist.ProcessGroupNCCL(self.store, rank, world_size, nccl_opts)

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        """In place: every member ends with ``src``'s ``tensor``."""
        opts = dist.BroadcastOptions()
        opts.rootRank = src
        opts.rootTensor = 0
        self.pg.broadcast([tensor], opts).wait()


class TorchDistributedTransport:
    """Broadcast updates from member ``src`` of a :class:`PeerGroup` to every other member.

    Every member takes part in each transfer: ``src`` calls :meth:`send`, the others :meth:`recv` at the same
    point. The metadata (names, shapes, dtypes, version) goes first as JSON bytes; the tensors as uint8 buckets
    of at most ``bucket_bytes`` on ``device`` (CPU for gloo, the current CUDA device for NCCL); a tensor of at
    least ``direct_bytes`` is broadcast on its own, straight from its storage.
    """

    def __init__(
        self,
        peers: PeerGroup,
        *,
        src: int = 0,
        device: torch.device | str | None = None,
        bucket_bytes: int = 256 << 20,
        direct_bytes: int = 1 << 20,
    ) -> None:
        if bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes={bucket_bytes} must be > 0")
        if direct_bytes <= 0:
            raise ValueError(f"direct_bytes={direct_bytes} must be > 0")
        self.src = src
        self.peers = peers
        if device is None:
            device = f"cuda:{torch.cuda.current_device()}" if peers.backend == "nccl" else "cpu"
        self.device = torch.device(device)
        self.bucket_bytes = bucket_bytes
        self.direct_bytes = direct_bytes

    def _broadcast(self, tensor: torch.Tensor) -> None:
        self.peers.broadcast(tensor, self.src)

    def _broadcast_meta(self, meta: dict | None) -> dict:
        """``src`` sends ``meta`` as UTF-8 JSON (length first); every member returns it."""
        size = torch.zeros(1, dtype=torch.int64, device=self.device)
        payload = b""
        if meta is not None:
            payload = json.dumps(meta).encode()
            size.fill_(len(payload))
        self._broadcast(size)
        buf = torch.empty(int(size.item()), dtype=torch.uint8, device=self.device)
        if meta is not None:
            buf.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
        self._broadcast(buf)
        return json.loads(buf.cpu().numpy().tobytes().decode())

    def _buckets(self, sizes: list[int]) -> list[list[int]]:
        return bucket_indices(sizes, bucket_bytes=self.bucket_bytes, direct_bytes=self.direct_bytes)

    def send(self, update: WeightUpdate) -> None:
        if self.peers.rank != self.src:
            raise RuntimeError(f"send() called on member {self.peers.rank} but the source is {self.src}")
        names = list(update.tensors)
        tensors = [update.tensors[n].detach() for n in names]
        meta = {
            "version": update.version,
            "names": names,
            "shapes": [list(t.shape) for t in tensors],
            "dtypes": [str(t.dtype).removeprefix("torch.") for t in tensors],
        }
        self._broadcast_meta(meta)

        def as_bytes(i: int) -> torch.Tensor:  # a sharded tensor is gathered only now, bucket by bucket
            return _full(tensors[i]).contiguous().reshape(-1).view(torch.uint8)

        for bucket in self._buckets([_num_bytes(t) for t in tensors]):
            if len(bucket) == 1:
                buf = as_bytes(bucket[0]).to(self.device)
            else:
                buf = torch.cat([as_bytes(i).to(self.device) for i in bucket])
            self._broadcast(buf)

    def recv(
        self,
        targets: Mapping[str, torch.Tensor] | None = None,
        held_version: int = 0,
        expected_version: int | None = None,
    ) -> WeightUpdate:
        """Receive the next update. A tensor sent on its own lands straight in its ``targets`` tensor (no staging
        copy) when that one is contiguous with the same shape and dtype on the transport's device and the update
        is newer than ``held_version`` and is ``expected_version`` (when given); else it is staged, so a receiver
        that refuses the update keeps its weights."""
        meta = self._broadcast_meta(None)
        dtypes = [getattr(torch, d) for d in meta["dtypes"]]
        if not all(isinstance(dt, torch.dtype) for dt in dtypes):
            raise ValueError(f"weight update names an unknown dtype: {meta['dtypes']}")
        sizes = [
            int(torch.Size(shape).numel()) * torch.empty((), dtype=dt).element_size()
            for shape, dt in zip(meta["shapes"], dtypes)
        ]
        wanted = expected_version is None or meta["version"] == expected_version
        in_place = targets if meta["version"] > held_version and wanted else None
        tensors: dict[str, torch.Tensor] = {}
        for bucket in self._buckets(sizes):
            if len(bucket) == 1 and in_place is not None:
                i = bucket[0]
                dst = in_place.get(meta["names"][i])
                if (
                    dst is not None
                    and dst.dtype == dtypes[i]
                    and list(dst.shape) == list(meta["shapes"][i])
                    and dst.device == self.device
                    and dst.is_contiguous()
                ):
                    self._broadcast(dst.detach().reshape(-1).view(torch.uint8))
                    tensors[meta["names"][i]] = dst.detach()
                    continue
            buf = torch.empty(sum(sizes[i] for i in bucket), dtype=torch.uint8, device=self.device)
            self._broadcast(buf)
            offset = 0
            for i in bucket:
                chunk = buf[offset : offset + sizes[i]]
                offset += sizes[i]
                tensors[meta["names"][i]] = chunk.view(dtypes[i]).reshape(meta["shapes"][i])
        return WeightUpdate(version=meta["version"], tensors=tensors)


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


class WeightSyncCoordinator:
    """The driver's part of the weight protocol, between an actor and a rollout worker group.

    The workers hold a :class:`WeightSync` each and expose it as these registered methods (the names this class
    calls): the actor group ``weight_sync_endpoint`` (rank 0), ``join_weight_sync(host, port, world_size,
    backend)``, ``send_weights(version)`` and ``state_dict()`` (full CPU tensors); the rollout group
    ``join_weight_sync(...)``, ``receive_weights(version)`` (not restarted on a dead worker: the group it
    waits in is gone), ``weight_version()`` and ``load_weights(state_dict, version)``.

    Args:
        actor, rollout: The two worker groups.
        in_process: Actor and rollout share this process (local backend): a sync copies the actor's state dict
            into the rollout. Else the actor's rank 0 broadcasts straight to the rollout ranks over a peer group
            (NCCL when every member has a GPU, else gloo); only version numbers pass through here.
    """

    def __init__(self, actor: WorkerGroup, rollout: WorkerGroup, *, in_process: bool) -> None:
        self.actor, self.rollout, self.in_process = actor, rollout, in_process
        self.version: int | None = None  # the version last synced to the rollout (None: never)
        self._joined = False

    def sync(self, version: int) -> dict[str, int] | None:
        """Sync the actor's weights to every rollout rank as ``version``.

        A rollout rank that died before or during the sync is replaced (the rollout group's ``max_restarts``; its
        ``on_restart`` calls :meth:`resync`) and the sync runs again over a new peer group.

        Returns:
            Across processes: the ``tensors`` and ``bytes`` rollout rank 0 received; in one process: None.

        Raises:
            StaleWeightsError: ``version`` is not newer than the last synced one.
        """
        if self.version is not None and version <= self.version:
            raise StaleWeightsError(
                f"weight version {version} is not newer than the last synced version {self.version}"
            )
        received = None
        if self.in_process:
            self.rollout.load_weights(self.actor.state_dict(), version)
        else:
            for attempt in range(1 + self.rollout.max_restarts):
                restarts = self.rollout.num_restarts
                self.rollout.weight_version.submit().result()  # a dead rank is replaced (and re-synced) here
                try:
                    received = self._send(version)
                    break
                except Exception:
                    self.rollout.weight_version.submit().result()  # was it a rollout rank that died?
                    if self.rollout.num_restarts == restarts or attempt == self.rollout.max_restarts:
                        raise
        self.version = version
        return received

    def resync(self, rank: int) -> None:
        """Rollout rank ``rank`` is a new process with its own initial weights and no place in the peer group:
        rebuild the group and send the current version again (to every rank: a new group's first send is a full
        one), so the rank generates with the actor's weights, bit for bit. In one process nothing to do (the
        rollout group replays ``load_weights``)."""
        if self.in_process:
            return
        self._joined = False
        if self.version is not None:
            self._send(self.version)

    def connect(self) -> None:
        """(Re)build the peer group: every member joins at once; the next sync is a full one."""
        members = [self.actor.placements[0], *self.rollout.placements]
        backend = "nccl" if all(p.local_gpu is not None for p in members) else "gloo"
        host, port = self.actor.weight_sync_endpoint()
        world = 1 + self.rollout.world_size
        joins = [
            self.actor.join_weight_sync.submit(host, port, world, backend),
            self.rollout.join_weight_sync.submit(host, port, world, backend),
        ]
        for j in joins:
            j.result()
        self._joined = True

    def _send(self, version: int) -> dict[str, int]:
        if not self._joined:
            self.connect()
        sent = self.actor.send_weights.submit(version)
        receiving = self.rollout.receive_weights.submit(version)
        try:
            sent.result()
            return receiving.result()
        except Exception:
            # the sender dropped its end of the group, so receivers still waiting fail fast; rebuild next time
            self._joined = False
            raise


def state_dicts_equal(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    """Whether two state dicts have the same keys and bit-identical tensors."""
    return a.keys() == b.keys() and all(_same_bytes(a[k], b[k].detach().to("cpu")) for k in a)
