"""Writing a model's weights as safetensors one tensor at a time.

``safetensors.torch.save_file`` takes every tensor of a file at once, so exporting merged LoRA weights held a
merged copy of every adapted weight (most of a 7B language model) beside the model. Here a tensor may be
:class:`Deferred` (its shape and dtype now, its values computed when written): the header is written from the
shapes, then each tensor is computed, copied to the host, written and dropped, so a save holds one tensor beyond
the model. The files are standard safetensors (read by ``safetensors.safe_open``).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

INDEX_NAME = "model.safetensors.index.json"

_CODES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


@dataclass(frozen=True)
class Deferred:
    """A tensor computed only when written (e.g. a base weight plus its LoRA delta)."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    compute: Callable[[], torch.Tensor]


TensorOrDeferred = torch.Tensor | Deferred


def _shape_dtype(t: TensorOrDeferred) -> tuple[tuple[int, ...], torch.dtype]:
    return tuple(t.shape), t.dtype


def nbytes(t: TensorOrDeferred) -> int:
    shape, dtype = _shape_dtype(t)
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def materialize(t: TensorOrDeferred) -> torch.Tensor:
    """The values of ``t`` on the host, contiguous (a tensor already there is not copied)."""
    value = t.compute() if isinstance(t, Deferred) else t
    return value.detach().to("cpu").contiguous()


def write_safetensors(
    path: str | Path, tensors: Mapping[str, TensorOrDeferred], metadata: dict[str, str] | None = None
) -> None:
    """Write ``tensors`` (sorted by name) to one safetensors file, computing and writing one at a time."""
    names = sorted(tensors)
    header: dict[str, object] = {"__metadata__": dict(metadata or {})}
    offset = 0
    for name in names:
        shape, dtype = _shape_dtype(tensors[name])
        if dtype not in _CODES:
            raise ValueError(f"tensor {name}: dtype {dtype} cannot be written to safetensors")
        size = nbytes(tensors[name])
        header[name] = {"dtype": _CODES[dtype], "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(blob)))
        fh.write(blob)
        for name in names:
            value = materialize(tensors[name])
            if _shape_dtype(value) != _shape_dtype(tensors[name]):
                raise ValueError(
                    f"tensor {name}: computed {tuple(value.shape)} {value.dtype}, announced "
                    f"{_shape_dtype(tensors[name])}"
                )
            fh.write(value.reshape(-1).view(torch.uint8).numpy().data)
            del value


def write_weights(
    folder: str | Path,
    tensors: Mapping[str, TensorOrDeferred],
    *,
    max_shard_bytes: int,
    single_file: str | None = None,
) -> list[str]:
    """Write ``tensors`` into ``folder``: ``single_file`` (e.g. ``model.safetensors``) when given and they fit
    in one shard, else ``model-0000i-of-0000N.safetensors`` shards of at most ``max_shard_bytes`` (a larger
    tensor alone) with ``model.safetensors.index.json``. Returns the written file names."""
    out = Path(folder)
    shards: list[list[str]] = [[]]
    size = 0
    for name in sorted(tensors):
        n = nbytes(tensors[name])
        if shards[-1] and size + n > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += n
    meta = {"format": "pt"}
    if single_file is not None and len(shards) == 1:
        write_safetensors(out / single_file, tensors, meta)
        return [single_file]
    weight_map: dict[str, str] = {}
    files = []
    for i, shard in enumerate(shards, start=1):
        file = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(out / file, {k: tensors[k] for k in shard}, meta)
        weight_map.update(dict.fromkeys(shard, file))
        files.append(file)
    total = sum(nbytes(t) for t in tensors.values())
    (out / INDEX_NAME).write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
    )
    return files
