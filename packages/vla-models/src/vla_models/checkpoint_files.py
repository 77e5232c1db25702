"""Reading a checkpoint folder's files safely, for every model family: safetensors only (no pickle, no remote
code), checked before use.

:func:`read_state_dict` reads a folder's weights (sharded with ``model.safetensors.index.json``, or one
``model.safetensors``): a folder with a ``manifest.json`` (written by :func:`write_model_manifest`) has each
file's size and sha256 verified (a manifest without checksums is refused), every tensor must have the dtype
``config.json`` declares (``torch_dtype`` / ``precision``; float32 is allowed beside a half-precision dtype) and
finite values; an error is one line naming the file or the tensor. :func:`check_weight_headers` checks the same
without reading a tensor's values.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from vla_models.safetensors_writer import INDEX_NAME

MODEL_MANIFEST = "manifest.json"
_MANIFEST_FORMAT = 1
_HASH_CHUNK = 8 << 20
# what config.json may declare as the weights' dtype (``torch_dtype``, ``precision``, ``vla_models.precision``)
_DECLARED_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_model_manifest(folder: str | Path) -> Path:
    """Write ``<folder>/manifest.json``: every other file below ``folder`` with its size and sha256 (call it
    last, after every file of the folder is written). :func:`read_state_dict` verifies it on load."""
    root = Path(folder)
    files = {
        str(f.relative_to(root)): {"size": f.stat().st_size, "sha256": _sha256(f)}
        for f in sorted(root.rglob("*"))
        if f.is_file() and f.relative_to(root) != Path(MODEL_MANIFEST)
    }
    out = root / MODEL_MANIFEST
    out.write_text(json.dumps({"format_version": _MANIFEST_FORMAT, "files": files}, indent=1))
    return out


def verify_model_manifest(folder: str | Path, *, checksums: bool = True) -> dict[str, Any] | None:
    """Check ``folder`` against its ``manifest.json``: every listed file present, inside the folder, at its size
    and (``checksums``) with its sha256. Returns the listed files, or None when the folder has no manifest.

    Raises:
        ValueError: a malformed manifest, one without a sha256 for a file, or a missing, truncated or altered
            file (one line naming it).
    """
    root = Path(folder)
    path = root / MODEL_MANIFEST
    if not path.exists():
        return None
    manifest = read_json(path)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        raise ValueError(f"{path} has no 'files' object")
    for rel, entry in files.items():
        file = root / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ValueError(f"{path} lists {rel!r}, which is outside the folder")
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            raise ValueError(
                f"{path} has no sha256 for {rel}: the folder cannot be verified (write it with "
                "write_model_manifest, or remove the manifest to load it with the dtype and finiteness checks only)"
            )
        if not file.is_file():
            raise FileNotFoundError(f"{file} is missing (listed in {MODEL_MANIFEST})")
        if file.stat().st_size != entry.get("size"):
            raise ValueError(
                f"{file} is truncated or altered: {file.stat().st_size} bytes, {MODEL_MANIFEST} recorded {entry.get('size')}"
            )
        if checksums:
            try:
                digest = _sha256(file)
            except OSError as exc:
                raise ValueError(f"{file} cannot be read: {exc.strerror or exc}") from None
            if digest != entry["sha256"]:
                raise ValueError(
                    f"{file} is altered: its sha256 differs from the one recorded in {MODEL_MANIFEST}"
                )
    return files


def declared_dtype(config: Any) -> torch.dtype | None:
    """The weights' dtype a ``config.json`` object declares (``torch_dtype``, ``precision`` or
    ``vla_models.precision``), or None."""
    if not isinstance(config, dict):
        return None
    block = config.get("vla_models") if isinstance(config.get("vla_models"), dict) else {}
    for value in (config.get("torch_dtype"), config.get("precision"), block.get("precision")):
        if isinstance(value, str) and value in _DECLARED_DTYPES:
            return _DECLARED_DTYPES[value]
    return None


def _allowed_dtypes(declared: torch.dtype | None) -> set[torch.dtype] | None:
    # half-precision models keep some tensors (norms, heads) in float32
    return None if declared is None else {declared, torch.float32}


def check_tensor(file: Path, name: str, tensor: torch.Tensor, declared: torch.dtype | None) -> None:
    """One line naming the tensor if its dtype is not the declared one (or float32) or it holds NaN/inf."""
    allowed = _allowed_dtypes(declared)
    if allowed is not None and tensor.dtype not in allowed:
        raise ValueError(
            f"{file}: tensor {name} has dtype {str(tensor.dtype).removeprefix('torch.')}, config.json declares "
            f"{str(declared).removeprefix('torch.')}"
        )
    if tensor.is_floating_point() and not _all_finite(tensor):
        bad = int((~torch.isfinite(tensor)).sum())
        raise ValueError(f"{file}: tensor {name} holds {bad} non-finite value(s) (NaN or inf)")


_FINITE_CHUNK = 1 << 22  # elements per isfinite() call: its bool mask stays small beside a large embedding


def _all_finite(tensor: torch.Tensor) -> bool:
    flat = tensor.reshape(-1)
    return all(bool(torch.isfinite(part).all()) for part in flat.split(_FINITE_CHUNK))


def read_json(path: Path, *, expect: type | None = None) -> Any:
    """A JSON file of a checkpoint folder; a missing, unreadable or malformed file is one line naming it.

    Args:
        expect: the type the top-level value must have (``dict`` for a config), or None for any.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file cannot be read (permissions), is not UTF-8 JSON, nests deeper than the parser
            allows, or its top-level value is not ``expect``.
    """
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    try:
        text = path.read_text()
    except OSError as e:
        raise ValueError(f"{path} cannot be read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None
    except RecursionError:
        raise ValueError(f"{path} is not valid JSON: it nests deeper than the JSON parser allows") from None
    if expect is not None and not isinstance(value, expect):
        raise ValueError(f"{path} holds a JSON {json_kind(value)} where a JSON {json_kind(expect())} belongs")
    return value


def json_kind(value: Any) -> str:
    """The JSON name of a parsed value's type (object, array, string, number, boolean, null)."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "null" if value is None else type(value).__name__


def _weight_files(p: Path) -> list[Path]:
    if (p / INDEX_NAME).exists():
        index = read_json(p / INDEX_NAME)
        if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
            raise ValueError(f"{p / INDEX_NAME} has no 'weight_map'")
        files = [p / str(name) for name in sorted(set(index["weight_map"].values()))]
    elif (p / "model.safetensors").exists():
        files = [p / "model.safetensors"]
    else:
        raise FileNotFoundError(
            f"{p} has neither {INDEX_NAME} nor model.safetensors (only safetensors are loaded)"
        )
    for f in files:
        if f.parent != p:
            raise ValueError(f"{p / INDEX_NAME} names {f.name!r}, which is outside the folder")
        if not f.is_file():
            raise FileNotFoundError(f"{f} (listed in {INDEX_NAME}) does not exist")
    return files


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint directory (sharded with an index, or a single ``model.safetensors``), checked:
    the folder's manifest verified when it has one (every weights file must be listed), each tensor's dtype
    against the one ``config.json`` declares, and every value finite (see the module docstring)."""
    p = Path(path)
    files = _weight_files(p)
    listed = verify_model_manifest(p)
    if listed is not None:
        for f in files:
            if f.name not in listed:
                raise ValueError(f"{f} is not listed in {p / MODEL_MANIFEST}: the folder cannot be verified")
    declared = declared_dtype(read_json(p / "config.json")) if (p / "config.json").is_file() else None
    sd: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            # read into the process's own memory, not mapped from the file: the tensors become the model's
            # weights (meta_init), which must not change or fault when the folder is later overwritten
            tensors = load_file(str(f), backend="pread")
        except Exception as e:  # safetensors raises its own error types for a truncated/corrupt file
            raise ValueError(f"{f} is not a readable safetensors file: {' '.join(str(e).split())}") from None
        for name, tensor in tensors.items():
            check_tensor(f, name, tensor, declared)
        sd.update(tensors)
    return sd


def check_weight_headers(path: str | Path) -> None:
    """What :func:`read_state_dict` checks without reading a tensor's values: the manifest's sizes, that every
    weights file has a readable safetensors header, and each tensor's dtype against ``config.json``.

    Raises:
        FileNotFoundError / ValueError: one line naming the file or the tensor.
    """
    from safetensors import safe_open

    p = Path(path)
    files = _weight_files(p)
    listed = verify_model_manifest(p, checksums=False)
    declared = declared_dtype(read_json(p / "config.json")) if (p / "config.json").is_file() else None
    allowed = _allowed_dtypes(declared)
    for f in files:
        if listed is not None and f.name not in listed:
            raise ValueError(f"{f} is not listed in {p / MODEL_MANIFEST}: the folder cannot be verified")
        try:
            with safe_open(str(f), framework="pt") as handle:
                dtypes = {k: handle.get_slice(k).get_dtype() for k in handle.keys()}  # noqa: SIM118
        except Exception as e:  # a cut or malformed header, an unreadable file
            raise ValueError(f"{f} is not a readable safetensors file: {' '.join(str(e).split())}") from None
        for name, code in dtypes.items():
            dtype = _SAFETENSORS_DTYPES.get(code)
            if allowed is not None and dtype not in allowed:
                raise ValueError(
                    f"{f}: tensor {name} has dtype {str(dtype).removeprefix('torch.') if dtype else code}, "
                    f"config.json declares {str(declared).removeprefix('torch.')}"
                )


_SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
