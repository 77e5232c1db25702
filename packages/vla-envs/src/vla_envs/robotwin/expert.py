"""RoboTwin's own task expert (`play_once`) as actions of the adapter: the commanded joint path it executes, cut into
joint-position waypoints that RoboTwin's `step` replays.

`play_once` plans with mplib and drives the arms along dense joint trajectories (250 Hz), with gripper motions in
between. The RoboTwin process records RoboTwin's 14-D state (each arm's joint drive targets and commanded gripper
opening) after every physics step of it (`RoboTwinProcess.expert`); `waypoints_from_path` keeps the points where a
motion ends (the command stands still afterwards, e.g. a planned move or a gripper closing has finished) and, inside
a motion, points at most `max_joint_step` rad apart in every arm joint, so RoboTwin's time parameterisation of the
waypoints follows the planned path closely. Each waypoint is one action of the adapter (14-D absolute joint
positions and gripper openings, RoboTwin's action layout).
"""

from __future__ import annotations

import numpy as np

# RoboTwin's 14-D layout: [left arm joints 0-5, left gripper 6, right arm joints 7-12, right gripper 13]
ARM_DIMS = np.array([0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12])
GRIPPER_DIMS = np.array([6, 13])
MAX_JOINT_STEP = 0.25  # rad between consecutive waypoints inside one motion


def waypoints_from_path(
    path: np.ndarray, *, max_joint_step: float = MAX_JOINT_STEP, atol: float = 1e-6
) -> np.ndarray:
    """Waypoints of a commanded path.

    Args:
        path: float [T + 1, 14], RoboTwin's commanded state before the expert (row 0) and after each physics step.
        max_joint_step: largest change of any arm joint (rad) between consecutive waypoints inside one motion.
        atol: changes up to this size count as standing still.

    Returns:
        float32 [K, 14]: every point after which the command stands still (the end of a motion; the path's last
        point included when it moved) and, inside a motion, the first point at least `max_joint_step` from the
        previous waypoint in some arm joint. K = 0 when the command never moved.
    """
    path = np.asarray(path, dtype=np.float64)
    if path.ndim != 2 or path.shape[1] != 14:
        raise ValueError(f"path must have shape [T + 1, 14], got {list(path.shape)}")
    if max_joint_step <= 0:
        raise ValueError(f"max_joint_step={max_joint_step} must be > 0")
    moved = np.abs(np.diff(path, axis=0)).max(axis=1) > atol  # [T]: step t changed the command
    keep: list[int] = []
    last = path[0]
    for t in range(1, len(path)):
        if not moved[t - 1]:
            continue
        motion_ends = t == len(path) - 1 or not moved[t]
        far = np.abs(path[t, ARM_DIMS] - last[ARM_DIMS]).max() >= max_joint_step
        if motion_ends or far:
            keep.append(t)
            last = path[t]
    return path[keep].astype(np.float32)
