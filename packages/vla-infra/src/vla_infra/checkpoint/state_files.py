"""A nested state (optimizer state, RNG states, trainer state) as a JSON file plus a safetensors file of its
tensor leaves: nothing in either can run code when read."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from vla_infra.checkpoint.files import CheckpointError, one_line, read_json


def own_storage(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU, contiguous tensors with no shared storage (what safetensors accepts)."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()  # storages already owned by a saved tensor
    for name, tensor in state.items():
        t = tensor.detach().to("cpu").contiguous()
        storage = t.untyped_storage()
        partial = t.storage_offset() != 0 or t.numel() * t.element_size() != storage.nbytes()
        # safetensors refuses tensors sharing a storage (tied weights, or views of one buffer at any offset):
        # keep the first tensor covering a whole storage, give every other one its own copy
        if partial or storage.data_ptr() in seen:
            t = t.clone()
        else:
            seen.add(storage.data_ptr())
        out[name] = t
    return out


# JSON tags of the values JSON has no type for; a dict holding exactly one tag's keys is that value
_TENSOR, _TUPLE, _ITEMS, _NDARRAY = "__tensor__", "__tuple__", "__items__", "__ndarray__"


class _Encoder:
    """Splits a nested value into JSON data and a flat ``name -> tensor`` dict (a DTensor's local shard)."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}

    def encode(self, value: Any, where: str) -> Any:
        import numpy as np

        if isinstance(value, torch.Tensor):
            from torch.distributed.tensor import DTensor

            name = f"t{len(self.tensors)}"
            self.tensors[name] = value.to_local() if isinstance(value, DTensor) else value
            return {_TENSOR: name}
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray):
            return {_NDARRAY: value.tolist(), "dtype": value.dtype.str}
        if isinstance(value, tuple):
            return {_TUPLE: [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
        if isinstance(value, list):
            return [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, Mapping):
            if all(isinstance(k, str) and not k.startswith("__") for k in value):
                return {k: self.encode(v, f"{where}.{k}") for k, v in value.items()}
            return {
                _ITEMS: [[self.encode(k, where), self.encode(v, f"{where}[{k!r}]")] for k, v in value.items()]
            }
        raise TypeError(
            f"{where} is a {type(value).__name__}: a checkpoint holds only tensors, numbers, strings, None, "
            "numpy arrays, and lists, tuples and dicts of them"
        )


def _decode(value: Any, tensors: Mapping[str, torch.Tensor], file: Path) -> Any:
    """The value :class:`_Encoder` encoded (tensors looked up in ``tensors``); anything else is an error."""
    import numpy as np

    if isinstance(value, list):
        return [_decode(v, tensors, file) for v in value]
    if not isinstance(value, dict):
        return value
    keys = set(value)
    if keys == {_TENSOR}:
        if value[_TENSOR] not in tensors:
            raise CheckpointError(f"{file} refers to tensor {value[_TENSOR]!r}, which its .safetensors lacks")
        return tensors[value[_TENSOR]]
    if keys == {_TUPLE} and isinstance(value[_TUPLE], list):
        return tuple(_decode(v, tensors, file) for v in value[_TUPLE])
    if keys == {_NDARRAY, "dtype"}:
        try:
            return np.asarray(value[_NDARRAY], dtype=np.dtype(str(value["dtype"])))
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"{file} holds an array that cannot be read: {exc}") from None
    if keys == {_ITEMS} and isinstance(value[_ITEMS], list):
        try:
            return {_decode(k, tensors, file): _decode(v, tensors, file) for k, v in value[_ITEMS]}
        except (TypeError, ValueError) as exc:  # an unhashable key or a malformed pair
            raise CheckpointError(f"{file} holds a malformed mapping: {exc}") from None
    return {k: _decode(v, tensors, file) for k, v in value.items()}


def write_state(folder: Path, stem: str, value: Mapping[str, Any]) -> None:
    """``<stem>.json`` and ``<stem>.safetensors`` (tensor leaves) in ``folder``."""
    encoder = _Encoder()
    data = encoder.encode(dict(value), stem)
    save_file(own_storage(encoder.tensors), str(folder / f"{stem}.safetensors"), metadata={"format": "pt"})
    (folder / f"{stem}.json").write_text(json.dumps(data))


def read_tensors(file: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{file} is not a readable safetensors file: {one_line(exc)}") from None


def read_state(folder: Path, stem: str) -> dict[str, Any]:
    """What :func:`write_state` wrote (JSON and safetensors only: nothing in them can run)."""
    file = folder / f"{stem}.json"
    try:
        data = read_json(file)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{file} is not a readable JSON file: {one_line(exc)}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{file} does not hold a JSON object")
    return _decode(data, read_tensors(folder / f"{stem}.safetensors"), file)
