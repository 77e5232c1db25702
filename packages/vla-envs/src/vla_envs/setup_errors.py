"""Set-up errors: what this machine lacks for a simulator to run, outside any config value.

Every kind is a `SimulatorSetupError` whose message is one line: what is missing, then the command that fixes it
(`... : run `...``). Each adapter's `check_setup` raises one before any simulator starts where the lack can be seen
from here (a Python package, an asset file, RoboTwin's interpreter, a display or Vulkan library); the simulators
raise the same kinds from inside a worker when it shows only there (a Vulkan driver that cannot create a device),
and the workers pass them on unchanged instead of retrying.

The kinds keep the built-in classes their callers catch: a missing package is an `ImportError`, missing assets a
`FileNotFoundError`.
"""

from __future__ import annotations

import ctypes.util
import glob
import importlib.util
import os
from collections.abc import Sequence

#: The script that installs the system libraries the simulators render with (EGL/OSMesa, Vulkan, Mesa).
SYSTEM_DEPS_FIX = "bash scripts/install_system_deps.sh"


class SimulatorSetupError(RuntimeError):
    """A simulator cannot run on this machine: something it needs is not installed or not found (one line)."""


class SimulatorNotInstalled(SimulatorSetupError, ImportError):
    """A Python package the simulator needs is not installed."""


class SimulatorAssetsMissing(SimulatorSetupError, FileNotFoundError):
    """Asset files the task opens are not on disk."""


class DisplayUnavailable(SimulatorSetupError):
    """The renderer cannot start: no OpenGL (EGL/OSMesa) library or X display for MuJoCo, no Vulkan device for
    SAPIEN."""


def missing_modules(modules: Sequence[str]) -> list[str]:
    """The top-level modules of `modules` that cannot be imported here (found without importing them)."""
    return [m for m in modules if not _findable(m)]


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it, a broken install
        return False


def check_packages(env_type: str, modules: Sequence[str], extra: str) -> None:
    """Raise `SimulatorNotInstalled` naming the modules of `modules` that are missing and the command that installs
    vla-envs' extra `extra`, which brings them."""
    missing = missing_modules(modules)
    if missing:
        raise SimulatorNotInstalled(
            f"env_type={env_type!r} needs the Python package(s) {', '.join(missing)}, not installed in this "
            f"environment: run `pip install -e 'packages/vla-envs[{extra}]'` in the repository (`bash "
            "scripts/setup.sh` installs every simulator)"
        )


#: MuJoCo's headless rendering backends and the library each loads.
_GL_LIBRARIES = {"egl": "EGL", "osmesa": "OSMesa"}


def check_mujoco_gl(env_type: str) -> None:
    """Raise `DisplayUnavailable` when MuJoCo's rendering backend (`MUJOCO_GL`, set by `configure_mujoco_gl`)
    cannot start here: its library is missing (EGL, OSMesa), or `glfw` without an X display."""
    backend = os.environ.get("MUJOCO_GL", "egl").lower()
    if backend in _GL_LIBRARIES:
        library = _GL_LIBRARIES[backend]
        if ctypes.util.find_library(library) is None:
            raise DisplayUnavailable(
                f"env_type={env_type!r} renders with MuJoCo's MUJOCO_GL={backend}, whose library lib{library} is "
                f"not installed: run `{SYSTEM_DEPS_FIX}` (Debian/Ubuntu: libegl1 libgl1-mesa-dri libosmesa6)"
            )
    elif backend == "glfw" and not os.environ.get("DISPLAY"):
        raise DisplayUnavailable(
            f"env_type={env_type!r} renders with MuJoCo's MUJOCO_GL=glfw, which needs an X display and DISPLAY "
            "is unset: render headless with `export MUJOCO_GL=egl PYOPENGL_PLATFORM=egl`"
        )


def vulkan_icd_files() -> list[str]:
    """The Vulkan driver manifests the Vulkan loader would read (`VK_DRIVER_FILES` / `VK_ICD_FILENAMES` when set,
    else the standard folders), those that exist."""
    chosen = os.environ.get("VK_DRIVER_FILES") or os.environ.get("VK_ICD_FILENAMES")
    if chosen:
        return [f for f in chosen.split(os.pathsep) if os.path.isfile(f)]
    folders = ("/usr/share/vulkan/icd.d", "/usr/local/share/vulkan/icd.d", "/etc/vulkan/icd.d")
    return sorted(f for d in folders for f in glob.glob(os.path.join(d, "*.json")))


def vulkan_problem() -> str | None:
    """Why SAPIEN (ManiSkill) cannot find a Vulkan device here without trying to create one, or None: the
    Vulkan loader library or every driver manifest is missing."""
    if ctypes.util.find_library("vulkan") is None:
        return "the Vulkan loader (libvulkan) is not installed"
    if not vulkan_icd_files():
        chosen = os.environ.get("VK_DRIVER_FILES") or os.environ.get("VK_ICD_FILENAMES")
        where = (
            f"VK_ICD_FILENAMES/VK_DRIVER_FILES={chosen!r} names no existing file"
            if chosen
            else ("no Vulkan driver manifest under /usr/share/vulkan/icd.d")
        )
        return f"no Vulkan driver: {where}"
    return None
