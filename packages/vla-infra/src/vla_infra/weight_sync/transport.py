"""Moving a :class:`WeightUpdate` between processes: a broadcast over a :class:`PeerGroup` in byte buckets, and the
part the other ranks of a sharded actor play in it."""

from __future__ import annotations

import json
from collections.abc import Mapping

import torch

from vla_infra.weight_sync.peer_group import PeerGroup
from vla_infra.weight_sync.update import WeightUpdate


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
