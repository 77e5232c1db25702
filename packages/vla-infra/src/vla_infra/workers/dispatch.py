"""Dispatch modes: how a worker-group call splits its inputs over ranks and gathers the outputs.

=============  ===========================================  ==================================
dispatch       what rank ``i`` receives                      default collect
=============  ===========================================  ==================================
one_to_all     every argument unchanged                      ``list`` (one output per rank)
all_to_all     element ``i`` of every argument (lists of     ``list``
               length world_size)
split          chunk ``i`` of every splittable argument      ``concat``
               (tensor / ndarray / list / tuple / dict of
               those, split along dim 0; all must have the
               same leading size); other arguments
               (ints, strings, None, ...) unchanged
dp_split       rank ``i``'s data-parallel share: like         ``concat``
               ``split``, but a record (dataclass) with an
               int field ``split_unit`` is cut only between
               whole units of that many rows (a group that
               must stay on one rank); refused when a rank
               would get no unit
rank_zero      only rank 0 runs, with the arguments          ``first``
=============  ===========================================  ==================================

Dataclass instances split and join field by field, like dicts (typed batches cross worker boundaries as they are).

collect modes: ``list`` (outputs in rank order), ``concat`` (inverse of ``split``: tensors and arrays
concatenated along dim 0, lists and tuples joined, dicts and dataclasses merged key by key, None stays None),
``first`` (rank 0's output), ``none`` (returns None), or a function of the per-rank outputs (in rank order) for
outputs that only their owner knows how to join (e.g. prompts of different widths).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def _torch() -> Any:
    """torch if it is already imported (a tensor cannot exist otherwise); keeps worker start-up light."""
    return sys.modules.get("torch")


def _is_tensor(value: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(value, torch.Tensor)


DISPATCH_MODES: tuple[str, ...] = ("one_to_all", "all_to_all", "split", "dp_split", "rank_zero")
COLLECT_MODES: tuple[str, ...] = ("list", "concat", "first", "none")
DEFAULT_COLLECT: dict[str, str] = {
    "one_to_all": "list",
    "all_to_all": "list",
    "split": "concat",
    "dp_split": "concat",
    "rank_zero": "first",
}


def _is_record(value: Any) -> bool:
    """A dataclass instance: split and joined field by field, like a dict of its fields."""
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _fields(value: Any) -> dict[str, Any]:
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}


def _is_splittable(value: Any) -> bool:
    if _is_record(value):
        return _is_splittable(_fields(value))
    if isinstance(value, np.ndarray) or _is_tensor(value):
        return value.ndim >= 1
    if isinstance(value, (list, tuple)):
        return True
    if isinstance(value, dict):
        return any(_is_splittable(v) for v in value.values())
    return False


def _chunk_bounds(length: int, world_size: int) -> list[tuple[int, int]]:
    """Contiguous chunks whose sizes differ by at most one (``np.array_split`` sizes)."""
    base, extra = divmod(length, world_size)
    bounds, start = [], 0
    for i in range(world_size):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def unit_bounds(
    length: int, world_size: int, *, unit: int = 1, name: str = "argument"
) -> list[tuple[int, int]]:
    """Contiguous row ranges, one per rank, cut only between whole units of ``unit`` rows (data-parallel shares:
    e.g. a GRPO group of ``unit`` rows stays on one rank). Unit counts per rank differ by at most one.

    Raises:
        ValueError: ``length`` is not a whole number of units, or there are fewer units than ranks.
    """
    if unit < 1 or length % unit:
        raise ValueError(
            f"cannot split {name!r}: {length} rows are not a whole number of units of {unit} rows"
        )
    units = length // unit
    if units < world_size:
        raise ValueError(
            f"cannot split {name!r} over {world_size} ranks: it has {units} unit(s) of {unit} rows and a unit "
            f"(e.g. a group) must stay on one rank; give it at least {world_size} units or use fewer ranks"
        )
    return [(a * unit, b * unit) for a, b in _chunk_bounds(units, world_size)]


def split_value(value: Any, world_size: int, *, name: str = "argument") -> list[Any]:
    """Split one value along its leading dimension into ``world_size`` contiguous chunks.

    Args:
        value: Tensor/ndarray ``[N, ...]``, list/tuple of length N, or a dict (or dataclass) whose splittable
            values share the same N (non-splittable values are copied to every chunk). Anything else is
            repeated ``world_size`` times.
        world_size: Number of chunks.
        name: Argument name used in error messages.

    Returns:
        ``world_size`` chunks in rank order; chunk sizes differ by at most one.

    Raises:
        ValueError: if a dict's splittable values have different leading sizes.
    """
    return _split_value(value, world_size, name=name, unit=None)


def _split_value(value: Any, world_size: int, *, name: str, unit: int | None) -> list[Any]:
    """``split_value``; with ``unit`` set (``dp_split``) the cuts fall between whole units of ``unit`` rows."""
    if not _is_splittable(value):
        return [value] * world_size
    if _is_record(value):
        fields = _fields(value)
        if unit is not None:
            unit = int(fields.get("split_unit", 1))
        chunks = _split_value(fields, world_size, name=name, unit=unit)
        return [dataclasses.replace(value, **c) for c in chunks]
    if isinstance(value, dict):
        lengths = {k: _leading(v) for k, v in value.items() if _is_splittable(v)}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"cannot split {name!r}: its entries have different leading sizes {lengths}")
        parts = {k: _split_value(v, world_size, name=f"{name}[{k!r}]", unit=unit) for k, v in value.items()}
        return [{k: parts[k][i] for k in value} for i in range(world_size)]
    if unit is not None:
        bounds = unit_bounds(_leading(value), world_size, unit=unit, name=name)
    else:
        bounds = _chunk_bounds(_leading(value), world_size)
    return [value[a:b] for a, b in bounds]


def _leading(value: Any) -> int:
    if _is_record(value):
        return _leading(_fields(value))
    if isinstance(value, dict):
        return next(_leading(v) for v in value.values() if _is_splittable(v))
    return len(value) if isinstance(value, (list, tuple)) else int(value.shape[0])


def concat_values(values: Sequence[Any]) -> Any:
    """Concatenate per-rank outputs along dim 0 (inverse of :func:`split_value`).

    Args:
        values: One output per rank, all of the same kind.

    Returns:
        Tensors/arrays concatenated along dim 0, lists/tuples joined, dicts merged key by key, dataclasses
        field by field (one of the same class), ``None`` if every output is None; other values (e.g. floats)
        as a list.
    """
    first = values[0]
    if all(v is None for v in values):
        return None
    if _is_tensor(first):
        return _torch().cat(list(values), dim=0)
    if isinstance(first, np.ndarray):
        return np.concatenate(list(values), axis=0)
    if isinstance(first, list):
        return [item for v in values for item in v]
    if isinstance(first, tuple):
        return tuple(item for v in values for item in v)
    if isinstance(first, dict):
        return {k: concat_values([v[k] for v in values]) for k in first}
    if _is_record(first):
        joined = concat_values([_fields(v) for v in values])
        return dataclasses.replace(first, **joined)
    return list(values)


def dispatch_args(mode: str, world_size: int, args: tuple, kwargs: dict) -> list[tuple[int, tuple, dict]]:
    """Return ``(rank, args, kwargs)`` for every rank that runs the call."""
    if mode == "one_to_all":
        return [(r, args, kwargs) for r in range(world_size)]
    if mode == "rank_zero":
        return [(0, args, kwargs)]
    if mode == "all_to_all":
        for key, value in [*enumerate(args), *kwargs.items()]:
            if not isinstance(value, (list, tuple)) or len(value) != world_size:
                raise ValueError(
                    f"dispatch 'all_to_all': argument {key!r} must be a list with one entry per rank "
                    f"({world_size}), got {type(value).__name__}"
                    + (f" of length {len(value)}" if isinstance(value, (list, tuple)) else "")
                )
        return [
            (r, tuple(a[r] for a in args), {k: v[r] for k, v in kwargs.items()}) for r in range(world_size)
        ]
    if mode in ("split", "dp_split"):
        # arguments split independently must have one batch size, or rank i would get mismatched rows
        sizes = {
            str(key): _leading(value)
            for key, value in [*enumerate(args), *kwargs.items()]
            if _is_splittable(value)
        }
        if len(set(sizes.values())) > 1:
            raise ValueError(
                f"dispatch 'split': the split arguments have different leading sizes {sizes}; "
                "they must share one batch size"
            )
        unit = 1 if mode == "dp_split" else None
        split_args = [_split_value(a, world_size, name=str(i), unit=unit) for i, a in enumerate(args)]
        split_kwargs = {k: _split_value(v, world_size, name=k, unit=unit) for k, v in kwargs.items()}
        return [
            (r, tuple(a[r] for a in split_args), {k: v[r] for k, v in split_kwargs.items()})
            for r in range(world_size)
        ]
    raise ValueError(f"unknown dispatch mode {mode!r}; allowed: {', '.join(DISPATCH_MODES)}")


def collect_outputs(mode: str | Callable[[list[Any]], Any], outputs: list[Any]) -> Any:
    """Gather per-rank outputs (in rank order) according to ``mode`` (a collect mode or a function)."""
    if callable(mode):
        return mode(outputs)
    if mode == "list":
        return outputs
    if mode == "concat":
        return concat_values(outputs)
    if mode == "first":
        return outputs[0]
    if mode == "none":
        return None
    raise ValueError(f"unknown collect mode {mode!r}; allowed: {', '.join(COLLECT_MODES)}")


def register(
    dispatch: str = "one_to_all",
    *,
    collect: str | Callable[[list[Any]], Any] | None = None,
    replay: bool = False,
    restart: bool = True,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare how a :class:`~vla_infra.workers.Worker` method is called by its group.

    Args:
        dispatch: One of :data:`DISPATCH_MODES`.
        collect: One of :data:`COLLECT_MODES`, or a function joining the per-rank outputs (in rank order);
            defaults to :data:`DEFAULT_COLLECT` of ``dispatch``.
        replay: The method sets state a replacement worker needs (a seed, loaded weights, an env reset): a
            group with ``max_restarts > 0`` remembers the last successful call of it per rank and replays it
            on a worker it restarts, in the order the calls were made.
        restart: False for calls that must not bring a dead worker back (``close``): they raise the
            backend's error instead.

    Returns:
        A decorator that tags the method (the method itself is unchanged when called directly).
    """
    if dispatch not in DISPATCH_MODES:
        raise ValueError(f"register(dispatch={dispatch!r}): allowed: {', '.join(DISPATCH_MODES)}")
    collect = collect if collect is not None else DEFAULT_COLLECT[dispatch]
    if not callable(collect) and collect not in COLLECT_MODES:
        raise ValueError(
            f"register(collect={collect!r}): allowed: {', '.join(COLLECT_MODES)}, or a function of the outputs"
        )

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__vla_dispatch__ = (dispatch, collect)  # type: ignore[attr-defined]
        fn.__vla_restart__ = (replay, restart)  # type: ignore[attr-defined]
        return fn

    return decorate


def method_dispatch(fn: Any) -> tuple[str, str | Callable[[list[Any]], Any]]:
    """The ``(dispatch, collect)`` pair of a worker method (``one_to_all``/``list`` if undecorated)."""
    return getattr(fn, "__vla_dispatch__", ("one_to_all", "list"))


def method_restart(fn: Any) -> tuple[bool, bool]:
    """The ``(replay, restart)`` pair of a worker method (``False``/``True`` if undecorated)."""
    return getattr(fn, "__vla_restart__", (False, True))
