"""Options that make a PutOnPlateInScene25 env-step cheaper, applied inside the process that simulates the task.

The task code is the reference framework's, unchanged; each option is a subclass of the registered task class
that wraps one of its methods, so the physics, rewards and success flags stay bit-identical (tested):

    grasp_check="source"   the task's `evaluate()` asks `agent.is_grasping` about every one of its 25 objects
                           and keeps the answer for the episode's own object (`torch.where` on the selected ids);
                           here the other objects are answered "not grasped" without a contact query. The
                           answers the task keeps are the same, so is every flag and reward; about 0.037 -> 0.004 s
                           per step on one CPU core. "all" asks about every object, as the task is written.
    render_scale=s         the 3rd-view camera renders (640 s) x (480 s) pixels with its intrinsics scaled by s
                           (the same view, fewer pixels), and the task composites its background overlay at that
                           size. The picture changes slightly (a 64 px frame differs by well under one grey level
                           on average at s = 1/4, at object edges); states, rewards and success do not. The task
                           asserts its 640 x 480 sensor when an episode starts: during that call it is shown the
                           size it was written for. 1.0 renders the task's own sensor.

`task_class(cls, ...)` returns the class to build (the registered one when no option is on).
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator
from typing import Any

import numpy as np

CAMERA = "3rd_view_camera"
WRITTEN_HW = (480, 640)  # the sensor size the task code asserts
GRASP_CHECKS = ("source", "all")


def scaled_hw(render_scale: float) -> tuple[int, int]:
    """(H, W) of the task camera at `render_scale` (rounded; `check_render_scale` keeps it exact)."""
    return round(WRITTEN_HW[0] * render_scale), round(WRITTEN_HW[1] * render_scale)


def check_render_scale(render_scale: Any) -> str | None:
    """None when `render_scale` is usable, else what is allowed (one line)."""
    if isinstance(render_scale, bool) or not isinstance(render_scale, (int, float)):
        return "a number in (0, 1]"
    if not 0 < render_scale <= 1:
        return "a number in (0, 1]"
    h, w = (WRITTEN_HW[0] * render_scale, WRITTEN_HW[1] * render_scale)
    if abs(h - round(h)) > 1e-9 or abs(w - round(w)) > 1e-9:
        return "a factor that gives whole pixels of the 640 x 480 camera (1, 0.5, 0.25, 0.125, ...)"
    return None


def scaled_intrinsic(intrinsic: Any, render_scale: float) -> np.ndarray:
    """The 3x3 pinhole matrix of the same view rendered `render_scale` times as many pixels per side.

    Focal lengths scale by s; the principal point keeps its place in the picture when pixel centres are at
    integer coordinates: c' = (c + 0.5) s - 0.5.
    """
    k = np.array(intrinsic, dtype=np.float64).reshape(3, 3)
    out = k.copy()
    out[0, 0] *= render_scale
    out[1, 1] *= render_scale
    out[0, 1] *= render_scale
    out[0, 2] = (k[0, 2] + 0.5) * render_scale - 0.5
    out[1, 2] = (k[1, 2] + 0.5) * render_scale - 0.5
    return out


@contextlib.contextmanager
def _grasp_checks_only_for(agent: Any, actors: list[Any], num_envs: int, device: Any) -> Iterator[None]:
    """Within the block, `agent.is_grasping(actor)` is False for every actor not in `actors` (no contact query)."""
    import torch

    asked = agent.is_grasping  # the bound method of the agent's class
    wanted = {id(a) for a in actors}

    @functools.wraps(asked)
    def is_grasping(obj: Any, *args: Any, **kwargs: Any) -> Any:
        if id(obj) in wanted:
            return asked(obj, *args, **kwargs)
        return torch.zeros(num_envs, dtype=torch.bool, device=device)

    agent.is_grasping = is_grasping
    try:
        yield
    finally:
        del agent.is_grasping  # the class's method again


@contextlib.contextmanager
def _sensor_as_written(env: Any) -> Iterator[None]:
    """Within the block, the task camera's config reports the 640 x 480 the task asserts (the built camera is
    unchanged; nothing in the block renders)."""
    configs = env._sensor_configs
    actual = configs[CAMERA]
    shown = copy.copy(actual)
    shown.height, shown.width = WRITTEN_HW
    configs[CAMERA] = shown
    try:
        yield
    finally:
        configs[CAMERA] = actual


def task_class(cls: type, *, grasp_check: str = "source", render_scale: float = 1.0) -> type:
    """The class to build for task class `cls` with these options (`cls` itself when none is on)."""
    if grasp_check not in GRASP_CHECKS:
        raise ValueError(f"grasp_check={grasp_check!r} is invalid: one of {GRASP_CHECKS}")
    problem = check_render_scale(render_scale)
    if problem is not None:
        raise ValueError(f"render_scale={render_scale!r} is invalid: {problem}")
    if grasp_check == "all" and render_scale == 1:
        return cls
    members: dict[str, Any] = {
        "__doc__": f"{cls.__name__} with grasp_check={grasp_check!r}, render_scale={render_scale}"
    }
    if grasp_check == "source":

        def evaluate(self: Any, *args: Any, **kwargs: Any) -> Any:
            names = [self.carrot_names[int(i)] for i in self.select_carrot_ids.reshape(-1).tolist()]
            selected = [self.objs_carrot[n] for n in dict.fromkeys(names)]
            with _grasp_checks_only_for(self.agent, selected, self.num_envs, self.device):
                return cls.evaluate(self, *args, **kwargs)

        members["evaluate"] = evaluate
    if render_scale != 1:
        hw = scaled_hw(render_scale)
        members["overlay_images_hw"] = hw
        members["overlay_texture_hw"] = hw

        def _setup_sensors(self: Any, options: dict) -> None:
            from mani_skill.sensors.camera import parse_camera_configs

            written = parse_camera_configs(self.agent._sensor_configs)[CAMERA]
            custom = dict(self._custom_sensor_configs or {})
            custom[CAMERA] = {
                **custom.get(CAMERA, {}),
                "height": hw[0],
                "width": hw[1],
                "intrinsic": scaled_intrinsic(written.intrinsic, render_scale),
            }
            self._custom_sensor_configs = custom
            cls._setup_sensors(self, options)

        def _initialize_episode(self: Any, env_idx: Any, options: dict) -> None:
            with _sensor_as_written(self):
                cls._initialize_episode(self, env_idx, options)

        members["_setup_sensors"] = _setup_sensors
        members["_initialize_episode"] = _initialize_episode
    return type(cls.__name__, (cls,), members)
