"""Env-adapter registry: every simulator adapter (MetaWorld, ManiSkill3, LIBERO, RoboTwin, ...) is one
`EnvAdapter` record, and every place that needs per-env-type knowledge (`make_env`, `list_tasks`,
`check_env_config`, `task_grouping`, `demo_settings`, the `vla-envs` command line) looks it up here.

A built-in adapter is registered by a module `vla_envs/adapter_<name>.py` that calls `register_adapter` once. The
registry imports those modules on its first lookup; they name the adapter's functions as lazy "module:attr"
strings (or define small functions that import the adapter inside), so `import vla_envs` never imports a
simulator, and a lookup imports the adapter module only when one of its functions is called. Code outside
vla_envs (a test, a new simulator) registers its own record the same way.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vla_envs.base import BatchedEnv

# The functions of a record take the env's `vla_envs.EnvConfig` (`cfg`); the registry does not import it, since
# `EnvConfig` checks its `env_type` against the registry.
Factory = Callable[[Any], "BatchedEnv"]
TaskLister = Callable[[], list[str]]
ConfigChecker = Callable[[Any], Any]
GroupingFn = Callable[[Sequence[str]], "TaskGrouping"]


def resolve_ref(ref: Any) -> Any:
    """A callable, or the attribute a "package.module:attr" string names (its module imported now)."""
    if not isinstance(ref, str):
        return ref
    module_name, sep, attr = ref.partition(":")
    if not sep or not attr:
        raise ValueError(f"{ref!r} is not a 'module:attr' reference")
    return getattr(importlib.import_module(module_name), attr)


@dataclass(frozen=True)
class TaskGrouping:
    """Which group each task belongs to, the groups' order and their titles in the result table.

    Attributes:
        groups: task name -> group name (empty: the env type has no grouping; the table has tasks only).
        order: Group names in table column order.
        labels: group name -> column title.
    """

    groups: dict[str, str] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (picklable, JSON-friendly)."""
        return {"groups": dict(self.groups), "order": list(self.order), "labels": dict(self.labels)}


@dataclass(frozen=True)
class ScriptedDemos:
    """Scripted-expert demonstrations of an env type, written in the `vla_envs.demos` format.

    Attributes:
        generate: `(out_dir, *, num_workers, progress, **settings) -> meta`: roll out the experts and write a demo
            folder; returns what it wrote to meta.json.
        settings: `(cfg, *, episodes_per_task, seed) -> dict`: the `generate` keywords that record demos as env
            `cfg` observes and acts (JSON-friendly). None: demos cannot follow an `EnvConfig` (no
            `demo_settings`, so no supervised warm start from the app), though the command line may make them.
        from_cli: `(args: argparse.Namespace) -> dict`: the `generate` keywords of a `vla-envs demos <name> ...`
            command (its arguments are in `vla_envs.cli`). None: no command-line demos.
    """

    generate: Callable[..., dict[str, Any]] | str
    settings: Callable[..., dict[str, Any]] | str | None = None
    from_cli: Callable[[Any], dict[str, Any]] | str | None = None


@dataclass(frozen=True)
class EnvAdapter:
    """Everything vla_envs and the apps need to know about one env type.

    Each callable may be given as a lazy "module:attr" string, imported on first use.

    Attributes:
        name: the `EnvConfig.env_type` value.
        factory: `(EnvConfig) -> BatchedEnv`.
        task_lister: `() -> list[str]`, the valid task names (may import the adapter's task tables, never the
            simulator); None: the adapter has no fixed task list.
        check_config: `(EnvConfig) -> Any`: resolve (and so validate) every adapter-specific setting (tasks, task
            sets, cameras, image size, `extra` keys) without building or importing a simulator; raises ValueError
            naming `EnvConfig.<key>`. None: settings are checked when the env is built.
        task_grouping: `(tasks) -> TaskGrouping`: the groups of the reference result table (MetaWorld difficulty,
            LIBERO suite, ...); raises ValueError for a task unknown to the env type. None: tasks only.
        demos: scripted-expert demonstrations, or None.
        offload: whether the env can stop its simulators between phases and rebuild them (`offload()` /
            `onload()`, `env.enable_offload`): True, False, or a `(EnvConfig) -> Any` check that raises ValueError
            naming the setting that prevents it.
        check_setup: `(EnvConfig) -> Any`: raise a `vla_envs.SimulatorSetupError` (one line: what this machine
            lacks, the command that fixes it) when a package, asset, runtime or display library the env needs is
            missing, found without starting a simulator. None: such lacks show when the env is built.
    """

    name: str
    factory: Factory | str
    task_lister: TaskLister | str | None = None
    check_config: ConfigChecker | str | None = None
    task_grouping: GroupingFn | str | None = None
    demos: ScriptedDemos | None = None
    offload: bool | ConfigChecker | str = False
    check_setup: ConfigChecker | str | None = None

    def make_env(self, cfg: Any) -> BatchedEnv:
        """Build the batched env of `cfg` (whose `env_type` is this adapter's)."""
        return resolve_ref(self.factory)(cfg)  # type: ignore[no-any-return]

    def list_tasks(self) -> list[str]:
        """Valid task names ([] without a task lister)."""
        return [] if self.task_lister is None else list(resolve_ref(self.task_lister)())

    def check(self, cfg: Any) -> None:
        """Raise ValueError if `cfg` has a setting this adapter refuses (nothing without a checker)."""
        if self.check_config is not None:
            resolve_ref(self.check_config)(cfg)

    def check_machine(self, cfg: Any) -> None:
        """Raise a `SimulatorSetupError` if this machine lacks something the env of `cfg` needs (nothing without a
        `check_setup`)."""
        if self.check_setup is not None:
            resolve_ref(self.check_setup)(cfg)

    def check_offload(self, cfg: Any) -> None:
        """Raise ValueError (one line) if the env of `cfg` cannot release its simulators between phases."""
        if self.offload is False:
            raise ValueError(
                f"env_type={self.name!r} declares no offload (its EnvAdapter record has offload=False): its "
                "simulators stay resident"
            )
        if self.offload is not True:
            resolve_ref(self.offload)(cfg)

    def grouping(self, tasks: Sequence[str]) -> TaskGrouping:
        """The result-table grouping of `tasks` (an empty `TaskGrouping` without a grouping function)."""
        if self.task_grouping is None:
            return TaskGrouping()
        return resolve_ref(self.task_grouping)(list(tasks))  # type: ignore[no-any-return]


_ADAPTERS: dict[str, EnvAdapter] = {}
_DISCOVERED = False


def _discover() -> None:
    """Import every `vla_envs.adapter_*` module once (each registers its adapter)."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    here = [str(Path(__file__).parent)]
    names = sorted(m.name for m in pkgutil.iter_modules(here) if m.name.startswith("adapter_"))
    for name in names:
        importlib.import_module(f"vla_envs.{name}")


def register_adapter(adapter: EnvAdapter, *, overwrite: bool = False) -> EnvAdapter:
    """Add `adapter`; returns it. A name already registered with a different record is an error unless
    `overwrite` (which replaces it, a built-in adapter included)."""
    _discover()
    known = _ADAPTERS.get(adapter.name)
    if known is not None and known != adapter and not overwrite:
        raise ValueError(f"env type {adapter.name!r} is already registered")
    _ADAPTERS[adapter.name] = adapter
    return adapter


def unregister_adapter(name: str) -> None:
    """Remove a registered adapter (e.g. one a test registered)."""
    _discover()
    _ADAPTERS.pop(name, None)


def adapters() -> tuple[EnvAdapter, ...]:
    """Every registered adapter, by name."""
    _discover()
    return tuple(sorted(_ADAPTERS.values(), key=lambda a: a.name))


def list_env_types() -> list[str]:
    """Registered env type names, sorted."""
    return [a.name for a in adapters()]


def get_adapter(env_type: Any) -> EnvAdapter:
    """The adapter registered as `env_type`; an unknown one is a ValueError listing the registered ones."""
    _discover()
    adapter = _ADAPTERS.get(env_type) if isinstance(env_type, str) else None
    if adapter is None:
        raise ValueError(f"unknown env_type {env_type!r}; valid env types: {list_env_types()}")
    return adapter


def list_tasks(env_type: str) -> list[str]:
    """Valid task names of `env_type` (imports the adapter, not necessarily the simulator)."""
    return get_adapter(env_type).list_tasks()
