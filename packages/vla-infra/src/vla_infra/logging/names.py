"""Helpers that build metric names of the reference documents.

Namespaces: ``train/actor/*``, ``train/critic/*``, ``train/*``, ``rollout/*``, ``env/*``, ``time/*`` (with
``time/env/*``, ``time/rollout/*``, ``time/actor/*``) and ``eval/*``. The logger never renames keys:
:func:`namespaced` prefixes a group of them, :class:`StepTimer` reports ``time/<section>`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from vla_infra.workers.failures import phase

__all__ = ["TIME", "StepTimer", "namespaced"]

TIME = "time"


def namespaced(prefix: str, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``{"policy_loss": x}`` under ``"train/actor"`` -> ``{"train/actor/policy_loss": x}``.

    Raises:
        ValueError: if ``prefix`` is empty or ends with "/".
    """
    if not prefix or prefix.endswith("/"):
        raise ValueError(f"prefix={prefix!r} must be non-empty without a trailing '/' (e.g. 'train/actor')")
    return {f"{prefix}/{key}": value for key, value in metrics.items()}


class StepTimer:
    """Wall-clock sections of one step, reported as ``time/<name>`` seconds (summed if a name repeats). A section is
    also a :func:`~vla_infra.workers.phase`: a worker failure raised inside it names the section.

    Example:
        >>> timer = StepTimer()
        >>> with timer("generate_rollouts"):
        ...     pass
        >>> sorted(timer.metrics())
        ['time/generate_rollouts']
    """

    def __init__(self, prefix: str = TIME) -> None:
        self.prefix = prefix
        self._totals: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            with phase(name):
                yield
        finally:
            self._totals[name] = self._totals.get(name, 0.0) + time.perf_counter() - start

    def metrics(self, *, reset: bool = True) -> dict[str, float]:
        """``{"time/<name>": seconds}``; clears the totals unless ``reset=False``."""
        out = namespaced(self.prefix, self._totals)
        if reset:
            self._totals = {}
        return out
