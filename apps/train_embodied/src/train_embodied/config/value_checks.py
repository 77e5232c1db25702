"""Checks of one config value, each returning one-line errors that name the full key, the bad value and what is
allowed (or [] when the value is fine); the sections' `check(prefix)` methods add them up."""

from __future__ import annotations

from typing import Any


def one_of(key: str, value: Any, allowed: tuple[str, ...]) -> list[str]:
    """`["key='v' is not one of: a, b"]` if value is not allowed, else []."""
    if value in allowed:
        return []
    return [f"{key}={value!r} is not one of: {', '.join(allowed)}"]


def registered(
    key: str, value: Any, registry: dict[str, Any], unsupported: dict[str, str] | None = None
) -> list[str]:
    """`one_of` the names registered now in a vla_algos `registry` (in registration order); an unregistered name of
    `unsupported` is refused with its reason."""
    if isinstance(value, str) and value in registry:
        return []
    if unsupported and isinstance(value, str) and value in unsupported:
        return [f"{key}={value!r} is not supported: {unsupported[value]} (registered: {', '.join(registry)})"]
    return one_of(key, value, tuple(registry))


def lookup(get: Any, name: Any) -> Any:
    """The registered entry `get(name)`, or None for an unknown name (reported by `registered`)."""
    try:
        return get(name)
    except (ValueError, TypeError):
        return None


def with_property(registry: dict[str, Any], prop: str) -> str:
    """The registered names whose entry has `prop` set (e.g. `uses_critic`: `actor_critic`), for messages."""
    return ", ".join(name for name, entry in registry.items() if getattr(entry, prop)) or "(none registered)"


def at_least(key: str, value: float, low: float, *, allow: tuple[float, ...] = ()) -> list[str]:
    """Error unless `value >= low` (or value is one of the special values in `allow`, e.g. -1 = off)."""
    if value in allow or value >= low:
        return []
    extra = f" (or {', '.join(map(str, allow))})" if allow else ""
    return [f"{key}={value!r} is invalid: must be >= {low}{extra}"]


def above(key: str, value: float, low: float) -> list[str]:
    """Error unless `value > low`."""
    return [] if value > low else [f"{key}={value!r} is invalid: must be > {low}"]


def in_range(key: str, value: float, low: float, high: float) -> list[str]:
    """Error unless `low <= value <= high`."""
    if low <= value <= high:
        return []
    return [f"{key}={value!r} is invalid: must be in [{low}, {high}]"]
