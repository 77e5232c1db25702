"""Choose a headless OpenGL backend for MuJoCo before it is imported."""

from __future__ import annotations

import ctypes.util
import os


def configure_mujoco_gl() -> str:
    """Set `MUJOCO_GL` (and `PYOPENGL_PLATFORM`) if unset: EGL when libEGL is found, else OSMesa.

    Must run before `import mujoco`. An explicit `MUJOCO_GL` set by the user is always kept.

    Returns:
        The backend in use ("egl", "osmesa", "glfw", ...).
    """
    backend = os.environ.get("MUJOCO_GL")
    if not backend:
        if ctypes.util.find_library("EGL"):
            backend = "egl"
        elif ctypes.util.find_library("OSMesa"):
            backend = "osmesa"
        else:
            backend = "egl"  # fails later with a message that names the missing library
        os.environ["MUJOCO_GL"] = backend
    if backend in ("egl", "osmesa"):
        os.environ.setdefault("PYOPENGL_PLATFORM", backend)
    return backend
