"""Importing ManiSkill, checking assets and the Vulkan driver, and creating raw ManiSkill envs.

Three failure modes get a one-line `SimulatorSetupError` instead of a hang or a bare traceback:
    * mani-skill not installed -> `SimulatorNotInstalled` (an ImportError) naming the command that installs it.
    * a task whose assets are not downloaded -> `ManiSkillAssetsMissingError` naming the assets, the download
      command and `MS_ASSET_DIR` (ManiSkill's own `input()` prompt is never reached: we check first, and set
      `MS_SKIP_ASSET_DOWNLOAD_PROMPT=1` so that a prompt that slips through does not block).
    * no usable Vulkan device (SAPIEN needs one even for state observations) -> `ManiSkillUnavailableError`.
`check_setup` finds what it can before any simulator starts (packages, the PutOnPlateInScene25 asset files, the
Vulkan loader and driver manifests); a Vulkan driver that cannot create a device shows only when a worker builds
its env, with the same error.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

from vla_envs.config import EnvConfig
from vla_envs.maniskill import put_on_plate
from vla_envs.maniskill.put_on_plate import is_put_on_plate
from vla_envs.maniskill.tasks import TASKS, list_maniskill_tasks
from vla_envs.setup_errors import (
    SYSTEM_DEPS_FIX,
    DisplayUnavailable,
    SimulatorAssetsMissing,
    check_packages,
    vulkan_problem,
)

VULKAN_HELP = (
    f"run `{SYSTEM_DEPS_FIX}` (Mesa's lavapipe >= 23 on a machine without a GPU; Debian 12 takes it from "
    "bookworm-backports), or with an NVIDIA GPU install the NVIDIA Vulkan driver"
)

# Substrings of the errors SAPIEN raises when no suitable Vulkan device exists.
_VULKAN_ERRORS = (
    "ErrorIncompatibleDriver",
    "Failed to find a supported physical device",
    "failed to find a rendering device",
    "vk::",
)


class ManiSkillUnavailableError(DisplayUnavailable):
    """No usable Vulkan device (or, for the GPU backend, no CUDA device): ManiSkill envs cannot be created here."""


class ManiSkillAssetsMissingError(SimulatorAssetsMissing):
    """The task needs assets that are not on disk (not downloaded, or not where MS_ASSET_DIR points)."""


def check_setup(cfg: EnvConfig) -> None:
    """Raise a `SimulatorSetupError` when this machine lacks what the env of `cfg` needs, found without importing
    ManiSkill: mani-skill itself, for PutOnPlateInScene25 tasks their task code (`rlinf`) and asset files, and a
    Vulkan loader with a driver."""
    from vla_envs.maniskill.options import resolve_options

    opts = resolve_options(cfg)
    check_packages("maniskill", ("mani_skill",), "maniskill")
    if opts.put_on_plate:
        put_on_plate.check_task_code_installed()
        for task in opts.task_list:
            try:
                put_on_plate.check_assets(task, opts.asset_dir)
            except put_on_plate.PutOnPlateAssetsError as exc:
                raise ManiSkillAssetsMissingError(str(exc)) from None
    if (problem := vulkan_problem()) is not None:
        raise ManiSkillUnavailableError(
            f"ManiSkill (SAPIEN) needs a Vulkan device and {problem}: {VULKAN_HELP}"
        )


def import_maniskill() -> Any:
    """Import gymnasium with ManiSkill's envs registered; returns the `gymnasium` module.

    Raises:
        ImportError: mani-skill is not installed (the message names the extra).
    """
    os.environ.setdefault("MS_SKIP_ASSET_DOWNLOAD_PROMPT", "1")
    check_packages("maniskill", ("mani_skill",), "maniskill")
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401  (registers the envs)

    return gym


def _missing_assets(env_id: str, robot_uids: str | None) -> list[str]:
    """Data-source ids the env (and its robot) needs that are not on disk."""
    from mani_skill.agents.registration import REGISTERED_AGENTS
    from mani_skill.utils import assets
    from mani_skill.utils.registration import REGISTERED_ENVS

    spec = REGISTERED_ENVS[env_id]
    wanted = list(spec.asset_download_ids or [])
    if robot_uids is None:  # the env class's default robot
        default = inspect.signature(spec.cls.__init__).parameters.get("robot_uids")
        if default is not None and isinstance(default.default, str):
            robot_uids = default.default
    if isinstance(robot_uids, str) and robot_uids in REGISTERED_AGENTS:
        wanted += list(REGISTERED_AGENTS[robot_uids].asset_download_ids or [])
    sources: set[str] = set()
    for uid in wanted:
        if uid in assets.DATA_GROUPS:
            sources.update(assets.expand_data_group_into_individual_data_source_ids(uid))
        elif uid in assets.DATA_SOURCES:
            sources.add(uid)
    return sorted(s for s in sources if not _is_downloaded(assets.DATA_SOURCES[s]))


def _is_downloaded(source: Any) -> bool:
    """ManiSkill only checks that the target exists, but a failed download leaves an empty folder behind."""
    path = Path(source.output_dir) / source.target_path
    if path.is_dir():
        return any(path.iterdir())
    return path.exists()


def check_task(
    env_id: str, *, robot_uids: str | None = None, allow_unlisted: bool = False, asset_dir: str | None = None
) -> None:
    """Fail fast, with instructions, when `env_id` cannot run here.

    Args:
        env_id: ManiSkill env id.
        robot_uids: Robot override (None: the task's default robot).
        allow_unlisted: Accept a registered ManiSkill env that is not in `TASKS` (the caller then supplies the
            instruction).
        asset_dir: PutOnPlateInScene25 tasks: the asset folder (None: MS_ASSET_DIR / MANISKILL_ASSET_DIR).

    Raises:
        ValueError: unknown task (lists the supported ones).
        ImportError: a PutOnPlateInScene25 task whose task code (the `rlinf` package) is not installed.
        ManiSkillAssetsMissingError: the assets are not downloaded (or, for PutOnPlateInScene25, not found).
    """
    if is_put_on_plate(env_id):
        check_put_on_plate(env_id, asset_dir)
        return
    import_maniskill()
    from mani_skill import ASSET_DIR
    from mani_skill.utils.registration import REGISTERED_ENVS

    supported = list_maniskill_tasks()
    if env_id not in REGISTERED_ENVS:
        raise ValueError(f"task={env_id!r} is not a registered ManiSkill env; supported tasks: {supported}")
    missing = _missing_assets(env_id, robot_uids)
    if missing:
        raise ManiSkillAssetsMissingError(
            f"ManiSkill task {env_id!r} needs the asset(s) {missing}, not found under {ASSET_DIR}: run "
            f"`python -m mani_skill.utils.download_asset {' '.join(missing)}` (offline: run it where there is "
            "network, copy its data folder here and point MS_ASSET_DIR at the folder above it; default "
            f"~/.maniskill). Tasks that need no download: {', '.join(sorted(TASKS))}"
        )
    if env_id not in TASKS and not allow_unlisted:
        raise ValueError(
            f"task={env_id!r} has no instruction in vla_envs.maniskill.TASKS; supported tasks: {supported} "
            "(or pass extra={'task_description': '...'} to use another registered ManiSkill env)"
        )


def check_put_on_plate(env_id: str, asset_dir: str | None = None) -> None:
    """The task code is installed, registers `env_id`, and the assets it opens are there (one-line errors)."""
    import_maniskill()
    put_on_plate.import_task_code()
    from mani_skill.utils.registration import REGISTERED_ENVS

    if env_id not in REGISTERED_ENVS:
        raise ValueError(
            f"task={env_id!r} is not registered by the installed task code (rlinf); the PutOnPlateInScene25 tasks "
            f"it should register: {list(put_on_plate.PUT_ON_PLATE_TASKS)}"
        )
    try:
        put_on_plate.check_assets(env_id, asset_dir)
    except put_on_plate.PutOnPlateAssetsError as exc:
        raise ManiSkillAssetsMissingError(str(exc)) from exc


def is_vulkan_error(exc: BaseException) -> bool:
    """True when `exc` is SAPIEN's "no usable Vulkan device" error."""
    return isinstance(exc, RuntimeError) and any(s in str(exc) for s in _VULKAN_ERRORS)


def make_raw_env(env_id: str, *, task_class: Any = None, **kwargs: Any) -> Any:
    """`gym.make(env_id, **kwargs)` with Vulkan errors turned into `ManiSkillUnavailableError`.

    Args:
        env_id: A registered ManiSkill env id.
        task_class: Build this subclass of the id's registered class instead (with the id's default keywords
            and `kwargs`; no gymnasium wrappers): `put_on_plate_cost.task_class`.

    Returns:
        The gymnasium env returned by ManiSkill, or the `task_class` env (use `.unwrapped` for the batched
        `BaseEnv` either way).
    """
    gym = import_maniskill()
    try:
        if task_class is not None:
            from mani_skill.utils.registration import REGISTERED_ENVS

            return task_class(**{**REGISTERED_ENVS[env_id].default_kwargs, **kwargs})
        return gym.make(env_id, **kwargs)
    except RuntimeError as exc:
        if is_vulkan_error(exc):
            raise ManiSkillUnavailableError(
                f"ManiSkill (SAPIEN) found no usable Vulkan device to create env {env_id!r} "
                f"({_first_line(exc)}): {VULKAN_HELP}"
            ) from exc
        raise


def make_task_env(opts: Any, num_envs: int) -> Any:
    """The raw ManiSkill env of resolved options `opts` (`ManiSkillOptions`) with `num_envs` sub-envs: a
    PutOnPlateInScene25 task is built as the class its step-cost options give (`put_on_plate_cost.task_class`)."""
    kwargs = opts.make_kwargs(num_envs=num_envs)
    if not opts.put_on_plate:
        return make_raw_env(opts.task, **kwargs)
    from mani_skill.utils.registration import REGISTERED_ENVS

    from vla_envs.maniskill.put_on_plate_cost import task_class

    registered = REGISTERED_ENVS[opts.task].cls
    cls = task_class(registered, grasp_check=opts.grasp_check, render_scale=opts.render_scale)
    return make_raw_env(opts.task, task_class=None if cls is registered else cls, **kwargs)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def maniskill_unavailable_reason() -> str | None:
    """None when a ManiSkill env can be created here, else why not (for test skips and diagnostics).

    Builds and closes one state-only PickCube env (about 1 s after the import).
    """
    try:
        env = make_raw_env("PickCube-v1", obs_mode="state", sim_backend="cpu", render_mode=None)
        env.close()
    except ImportError as exc:
        return str(exc)
    except ManiSkillUnavailableError as exc:
        return str(exc)
    return None
