"""Weight sync from the actor (trainer) to the rollout model, with a version number.

The sender builds a :class:`WeightUpdate` from the actor's *full* state dict (gathered from FSDP2 shards with
``get_model_state_dict(full_state_dict=True)``), either every tensor (``mode="full"``) or only the tensors
whose bytes changed since the previous send (``mode="delta"``); ``trainable_only=True`` restricts both to
parameters with ``requires_grad`` (e.g. LoRA adapters). Versions start at 1 and increase by one per send; a
receiver refuses an update that is not newer than what it holds, and a delta whose base is not the version
it holds (:class:`StaleWeightsError`).

Transports move updates between the two sides:

- :class:`InProcessTransport`: a FIFO in one process (local backend, collocated tests).
- :class:`TorchDistributedTransport`: a ``torch.distributed`` broadcast from the actor's source rank to every
  rank of a group (gloo on the CPU, NCCL on GPUs). Tensors travel as raw bytes in buckets, so every dtype is
  sent bit-exactly in a few collectives; the metadata travels as JSON bytes (nothing is unpickled).
- :class:`PeerGroup`: the group such a transport broadcasts over between separate worker processes (the
  actor's sending rank and the rollout ranks) when they share no default process group: it has its own TCP
  store, so data-parallel actor ranks keep their default (FSDP) group and rollout processes join only this one.

:class:`WeightSync` pairs a sender and/or a receiver with a transport and is what a worker calls.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal, Protocol

import torch
import torch.distributed as dist
from torch import nn

from vla_infra.fsdp import full_state_dict, is_fsdp_model
from vla_infra.rendezvous import tcp_store

__all__ = [
    "InProcessTransport",
    "PeerGroup",
    "ShardGatherFollower",
    "StaleWeightsError",
    "TorchDistributedTransport",
    "WeightReceiver",
    "WeightSender",
    "WeightSync",
    "WeightTransport",
    "WeightUpdate",
    "check_staleness",
    "state_dicts_equal",
]

SyncMode = Literal["full", "delta"]


class StaleWeightsError(RuntimeError):
    """An update (or data produced with some weights) is older than allowed, or a delta misses its base."""


@dataclass(frozen=True)
class WeightUpdate:
    """One sync message.

    Attributes:
        version: version of the weights after applying this update (>= 1).
        base_version: for a delta, the version the receiver must hold; None for a full update.
        tensors: name -> tensor (CPU or device), full (unsharded) shapes.
    """

    version: int
    base_version: int | None
    tensors: dict[str, torch.Tensor]

    @property
    def kind(self) -> SyncMode:
        return "full" if self.base_version is None else "delta"

    @property
    def num_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


def check_staleness(produced_by: int, current: int, *, max_staleness: int = 0) -> None:
    """Raise if data produced with weights ``produced_by`` lags ``current`` by more than ``max_staleness``.

    Raises:
        StaleWeightsError: naming both versions and the allowed lag.
    """
    if current - produced_by > max_staleness:
        raise StaleWeightsError(
            f"data produced with weight version {produced_by} but the actor is at version {current}; "
            f"max_staleness={max_staleness}"
        )


class WeightSender:
    """Actor side: builds versioned updates from the model's full state dict.

    With an FSDP2 model, :meth:`build_update` is a collective (all actor ranks call it) and only ``src_rank``
    (the rank that sends) returns an update; the others return None. With ``stream=True`` (and ``mode="full"``)
    nothing is gathered there: every rank returns an update of its sharded tensors, the source rank hands it
    to a :class:`TorchDistributedTransport` and the others to a :class:`ShardGatherFollower`, and each tensor
    is gathered just before its bucket is sent, so no rank ever holds the full weights.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        mode: SyncMode = "full",
        trainable_only: bool = False,
        src_rank: int = 0,
        stream: bool = False,
    ) -> None:
        if mode not in ("full", "delta"):
            raise ValueError(f"mode={mode!r} is not supported; allowed: 'full', 'delta'")
        self.model = model
        self.stream = stream
        self.mode: SyncMode = mode
        self.trainable_only = trainable_only
        self.src_rank = src_rank
        self.version = 0
        self._snapshot: dict[str, torch.Tensor] = {}

    @property
    def _streams(self) -> bool:
        return self.stream and self.mode == "full" and is_fsdp_model(self.model)

    def _is_source(self) -> bool:
        return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == self.src_rank

    def _state_dict(self) -> dict[str, torch.Tensor]:
        if self._streams:
            # sharded tensors as they are: the transport gathers each one just before it goes out
            state = {k: v.detach() for k, v in self.model.state_dict().items()}
        elif is_fsdp_model(self.model):
            # Every actor rank must join the all-gather; rank 0 receives the CPU copy.
            state = full_state_dict(self.model, cpu_offload=True)
            if self.src_rank != 0:
                raise ValueError(f"src_rank={self.src_rank}: an FSDP model's full state dict lands on rank 0")
        else:
            state = {k: v.detach() for k, v in self.model.state_dict().items()}
        if self.trainable_only:
            trainable = {name for name, p in self.model.named_parameters() if p.requires_grad}
            state = {k: v for k, v in state.items() if k in trainable}
        return state

    def build_update(self, version: int | None = None) -> WeightUpdate | None:
        """Snapshot the current weights into an update (None on non-source ranks).

        Args:
            version: The update's version when the caller numbers them (a trainer whose run resumes at some
                version); must be newer than the previous update's. Default: the previous one + 1.
        """
        if version is not None and version <= self.version:
            raise StaleWeightsError(
                f"version {version} is not newer than the last sent version {self.version}"
            )
        state = self._state_dict()
        if not self._is_source() and not self._streams:
            if version is not None:
                self.version = version
            return None
        base: int | None = None
        if self.mode == "delta" and self.version > 0:
            base = self.version
            state = {
                k: v
                for k, v in state.items()
                if k not in self._snapshot or not _same_bytes(v, self._snapshot[k])
            }
        if self.mode == "delta":
            for k, v in state.items():
                self._snapshot[k] = v.detach().to("cpu", copy=True)
        self.version = self.version + 1 if version is None else version
        return WeightUpdate(version=self.version, base_version=base, tensors=dict(state))


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.detach().to("cpu").reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


class WeightReceiver:
    """Rollout side: applies updates in place and tracks the version it holds (0 = never synced)."""

    def __init__(self, model: nn.Module, *, strict: bool = True) -> None:
        self.model = model
        self.strict = strict
        self.version = 0

    @torch.no_grad()
    def apply(self, update: WeightUpdate) -> int:
        """Copy the update's tensors into the model (cast to the model's dtype/device); returns the new version.

        Raises:
            StaleWeightsError: the update is not newer than the held version, or it is a delta whose base is
                not the held version (an update was missed; send a full one).
            KeyError / ValueError: (strict) a name the model does not have, or a shape mismatch.
        """
        if update.version <= self.version:
            raise StaleWeightsError(
                f"update version {update.version} is not newer than held version {self.version}"
            )
        if update.base_version is not None and update.base_version != self.version:
            raise StaleWeightsError(
                f"delta update {update.version} is based on version {update.base_version} but the receiver holds "
                f"version {self.version}; a full sync is needed"
            )
        targets = self.model.state_dict(keep_vars=True)
        for name, src in update.tensors.items():
            dst = targets.get(name)
            if dst is None:
                if self.strict:
                    raise KeyError(f"weight update has tensor {name!r} that the rollout model does not have")
                continue
            if dst.shape != src.shape:
                raise ValueError(
                    f"shape mismatch for {name!r}: update {tuple(src.shape)} vs model {tuple(dst.shape)}"
                )
            if src.data_ptr() != dst.data_ptr():  # else the transport already wrote it in place
                dst.data.copy_(src)
        self.version = update.version
        return self.version


class WeightTransport(Protocol):
    """Moves updates from the sender to the receivers."""

    #: True when every rank of the group must take part in each transfer (a collective).
    collective: bool

    def send(self, update: WeightUpdate) -> None: ...

    def recv(
        self, targets: Mapping[str, torch.Tensor] | None = None, held_version: int = 0
    ) -> WeightUpdate | None:
        """The next update. A transport may write tensors straight into ``targets`` (name -> the receiver's
        tensor, holding version ``held_version``) when the update applies on top of that version and shape,
        dtype and device match; it returns those tensors in the update."""
        ...


class InProcessTransport:
    """FIFO of updates inside one process; ``recv`` returns None when nothing is pending.

    ``send`` queues a copy of the tensors: an update holds views of the live parameters, and an optimizer step
    before the receiver applies it would otherwise hand newer weights out under the update's older version.
    """

    collective = False

    def __init__(self) -> None:
        self._queue: queue.Queue[WeightUpdate] = queue.Queue()

    def send(self, update: WeightUpdate) -> None:
        tensors = {name: t.detach().clone() for name, t in update.tensors.items()}
        self._queue.put(
            WeightUpdate(version=update.version, base_version=update.base_version, tensors=tensors)
        )

    def recv(
        self, targets: Mapping[str, torch.Tensor] | None = None, held_version: int = 0
    ) -> WeightUpdate | None:
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return None


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
    """Broadcast updates from ``src`` to every rank of a group.

    The group is ``peers`` (a :class:`PeerGroup`; ranks are its ranks), else ``group`` or the default
    ``torch.distributed`` group. Every rank of the group takes part in each transfer: ``src`` calls
    :meth:`send`, the others :meth:`recv` at the same point; ``recv`` on ``src`` returns the update it just sent
    (collocated rollout). The metadata (names, shapes, dtypes, versions) goes first as JSON bytes; the tensors
    as uint8 buckets of at most ``bucket_bytes`` on ``device`` (CPU for gloo, the current CUDA device for
    NCCL); a tensor of at least ``direct_bytes`` is broadcast on its own, straight from its storage.
    """

    collective = True

    def __init__(
        self,
        *,
        src: int = 0,
        group: dist.ProcessGroup | None = None,
        peers: PeerGroup | None = None,
        device: torch.device | str | None = None,
        bucket_bytes: int = 256 << 20,
        direct_bytes: int = 1 << 20,
    ) -> None:
        if peers is None and not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("TorchDistributedTransport needs peers= or an initialised process group")
        if bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes={bucket_bytes} must be > 0")
        if direct_bytes <= 0:
            raise ValueError(f"direct_bytes={direct_bytes} must be > 0")
        self.src = src
        self.group = group
        self.peers = peers
        if device is None:
            backend = peers.backend if peers is not None else dist.get_backend(group)
            device = f"cuda:{torch.cuda.current_device()}" if backend == "nccl" else "cpu"
        self.device = torch.device(device)
        self.bucket_bytes = bucket_bytes
        self.direct_bytes = direct_bytes
        self._local: WeightUpdate | None = None

    @property
    def rank(self) -> int:
        """This process's rank in the transport's group."""
        return self.peers.rank if self.peers is not None else dist.get_rank(self.group)

    def _broadcast(self, tensor: torch.Tensor) -> None:
        if self.peers is not None:
            self.peers.broadcast(tensor, self.src)
        else:
            dist.broadcast(tensor, src=self.src, group=self.group)

    def _broadcast_meta(self, meta: dict | None) -> dict:
        """``src`` sends ``meta`` as UTF-8 JSON (length first); every rank returns it."""
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
        if self.rank != self.src:
            raise RuntimeError(f"send() called on rank {self.rank} but the source rank is {self.src}")
        names = list(update.tensors)
        tensors = [update.tensors[n].detach() for n in names]
        meta = {
            "version": update.version,
            "base_version": update.base_version,
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
        self._local = update

    def recv(
        self, targets: Mapping[str, torch.Tensor] | None = None, held_version: int = 0
    ) -> WeightUpdate | None:
        """Receive the next update. A tensor sent on its own lands straight in its ``targets`` tensor (no staging
        copy) when that one is contiguous with the same shape and dtype on the transport's device and the update
        applies on top of ``held_version`` (newer; a delta based on it); else it is staged, so a receiver that
        refuses the update keeps its weights."""
        if self.rank == self.src:
            update, self._local = self._local, None
            return update
        meta = self._broadcast_meta(None)
        dtypes = [getattr(torch, d) for d in meta["dtypes"]]
        if not all(isinstance(dt, torch.dtype) for dt in dtypes):
            raise ValueError(f"weight update names an unknown dtype: {meta['dtypes']}")
        sizes = [
            int(torch.Size(shape).numel()) * torch.empty((), dtype=dt).element_size()
            for shape, dt in zip(meta["shapes"], dtypes)
        ]
        applies = meta["version"] > held_version and meta["base_version"] in (None, held_version)
        in_place = targets if applies else None
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
        return WeightUpdate(version=meta["version"], base_version=meta["base_version"], tensors=tensors)


class WeightSync:
    """Actor -> rollout weight sync as one call per side.

    Give ``actor_model`` on the actor ranks, ``rollout_model`` on the rollout ranks, both when collocated.
    With a :class:`TorchDistributedTransport` every rank of the group calls :meth:`sync` at the same point.

    Example:
        >>> sync = WeightSync(actor_model=actor, rollout_model=rollout, mode="delta")
        >>> sync.sync()   # -> 1, then 2, ...
    """

    def __init__(
        self,
        *,
        actor_model: nn.Module | None = None,
        rollout_model: nn.Module | None = None,
        transport: WeightTransport | None = None,
        mode: SyncMode = "full",
        trainable_only: bool = False,
        src_rank: int = 0,
        strict: bool = True,
    ) -> None:
        if actor_model is None and rollout_model is None:
            raise ValueError("WeightSync needs actor_model, rollout_model or both")
        self.transport: WeightTransport = transport if transport is not None else InProcessTransport()
        self.sender = (
            WeightSender(actor_model, mode=mode, trainable_only=trainable_only, src_rank=src_rank)
            if actor_model is not None
            else None
        )
        self.receiver = WeightReceiver(rollout_model, strict=strict) if rollout_model is not None else None

    @property
    def version(self) -> int:
        """The version held by this side (the receiver's if there is one, else the sender's)."""
        if self.receiver is not None:
            return self.receiver.version
        assert self.sender is not None
        return self.sender.version

    def sync(self) -> int:
        """Send (actor side) and/or receive and apply (rollout side); returns :attr:`version` afterwards.

        Raises:
            StaleWeightsError: see :meth:`WeightReceiver.apply`.
        """
        sent = False
        if self.sender is not None:
            update = self.sender.build_update()
            if update is not None:
                self.transport.send(update)
                sent = True
        if self.receiver is not None or (self.transport.collective and not sent):
            if self.receiver is None or sent:
                update = self.transport.recv()
            else:
                targets = self.receiver.model.state_dict(keep_vars=True)
                update = self.transport.recv(targets, held_version=self.receiver.version)
            if self.receiver is not None:
                if update is None:
                    raise RuntimeError("no weight update pending for the rollout side")
                self.receiver.apply(update)
        return self.version


def state_dicts_equal(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    """Whether two state dicts have the same keys and bit-identical tensors."""
    return a.keys() == b.keys() and all(_same_bytes(a[k], b[k].detach().to("cpu")) for k in a)
