"""Plain dict -> typed dataclass section, collecting one-line errors (unknown keys, wrong types, bad values)."""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar, Union

T = TypeVar("T")

_MISSING = object()


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is not None:
        return getattr(origin, "__name__", str(origin))
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str, errors: list[str]) -> Any:
    """Return `value` as type `tp`, or append an error and return _MISSING."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            sub: list[str] = []
            out = _coerce(value, arg, key, sub)
            if not sub:
                return out
        errors.append(f"{key}={value!r} is invalid: expected {_type_name(tp)}")
        return _MISSING
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            errors.append(f"{key}={value!r} is invalid: expected a section (mapping)")
            return _MISSING
        return build_section(tp, value, key, errors)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):  # NaN would pass every `x <= 0` check after this one
                errors.append(f"{key}={value!r} is invalid: must be a finite number")
                return _MISSING
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif origin is list:
        if isinstance(value, (list, tuple)):
            (item_tp,) = typing.get_args(tp) or (Any,)
            items = [_coerce(v, item_tp, f"{key}[{i}]", errors) for i, v in enumerate(value)]
            return items if _MISSING not in items else _MISSING
    elif origin is dict and isinstance(value, Mapping):
        return dict(value)
    elif origin is tuple:
        args = typing.get_args(tp)
        if isinstance(value, (list, tuple)) and len(args) == len(value) and Ellipsis not in args:
            items = [
                _coerce(v, a, f"{key}[{i}]", errors) for i, (v, a) in enumerate(zip(value, args, strict=True))
            ]
            return tuple(items) if _MISSING not in items else _MISSING
    errors.append(f"{key}={value!r} is invalid: expected {_type_name(tp)}")
    return _MISSING


def unknown_key_errors(data: Mapping[str, Any], known: list[str], prefix: str) -> list[str]:
    """One error per key of `data` not in `known`, with a close-match suggestion."""
    errors = []
    for key in data:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f" (did you mean '{prefix}.{close[0]}'?)" if close else ""
        errors.append(f"unknown key '{prefix}.{key}'{hint}; known keys: {', '.join(known)}")
    return errors


def coerce_fields(
    cls: type,
    data: Mapping[str, Any],
    prefix: str,
    errors: list[str],
    *,
    aliases: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`data` with each value checked against (and converted to) the type of `cls`'s field of that name, for a
    dataclass that validates its values itself (a package config such as vla_envs.EnvConfig): a value of the
    wrong type appends one error naming `prefix.key`. A nested dataclass field gets a checked plain dict; `aliases`
    maps a config key to its field name (`video_cfg` -> `video`). Keys that are not fields pass through."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for key, value in data.items():
        tp = hints.get((aliases or {}).get(key, key))
        if tp is None:
            out[key] = value
        elif dataclasses.is_dataclass(tp) and isinstance(value, Mapping):
            errors += unknown_key_errors(value, [f.name for f in dataclasses.fields(tp)], f"{prefix}.{key}")
            out[key] = coerce_fields(tp, value, f"{prefix}.{key}", errors)
        else:
            coerced = _coerce(value, tp, f"{prefix}.{key}", errors)
            out[key] = value if coerced is _MISSING else coerced
    return out


def build_section(cls: type[T], data: Mapping[str, Any], prefix: str, errors: list[str]) -> T:
    """Build dataclass `cls` from `data`; append errors (prefixed with `prefix`) instead of raising.

    Missing keys take the dataclass default. After type checks, `cls.check(prefix)` (if defined) adds
    value errors. Returns a default-constructed field wherever a value was rejected so that later checks
    can still run.
    """
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    known = [f.name for f in fields]
    errors += unknown_key_errors(data, known, prefix)
    kwargs: dict[str, Any] = {}
    for f in fields:
        if f.name not in data:
            continue
        value = _coerce(data[f.name], hints[f.name], f"{prefix}.{f.name}", errors)
        if value is not _MISSING:
            kwargs[f.name] = value
    obj = cls(**kwargs)
    check = getattr(obj, "check", None)
    if check is not None:
        errors += check(prefix)
    return obj
