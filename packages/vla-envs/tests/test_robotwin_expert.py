"""RoboTwin expert paths -> waypoints (`vla_envs.robotwin.expert.waypoints_from_path`), on paths shaped like those
RoboTwin's `play_once` commands: planned arm motions at 250 Hz, gripper motions in between, pauses."""

from __future__ import annotations

import numpy as np
import pytest

from vla_envs.robotwin.expert import waypoints_from_path

HOME = np.array([0.0, -0.3, -2.2, 0.0, 1.9, 0.785, 1.0] * 2)


def _move(start: np.ndarray, end: np.ndarray, steps: int) -> np.ndarray:
    """[steps, 14]: the command after each of `steps` physics steps of a straight move."""
    return start + (end - start) * np.linspace(0, 1, steps + 1)[1:, None]


def _hold(point: np.ndarray, steps: int) -> np.ndarray:
    return np.repeat(point[None], steps, axis=0)


def test_waypoints_end_every_motion_and_split_long_ones() -> None:
    reach = HOME.copy()
    reach[[7, 8, 12]] += [0.6, 0.3, -0.1]  # the right arm moves: 0.6 rad at most
    closed = reach.copy()
    closed[13] = 0.0  # then its gripper closes
    press = closed.copy()
    press[8] += 0.15  # then a short move
    path = np.concatenate(
        [
            HOME[None],
            _move(HOME, reach, 300),
            _hold(reach, 20),
            _move(reach, closed, 200),
            _hold(closed, 100),
            _move(closed, press, 50),
        ]
    )
    wps = waypoints_from_path(path, max_joint_step=0.25)
    assert wps.dtype == np.float32 and wps.shape[1] == 14
    # the reach is split where joint 7 has moved 0.25 and 0.5 rad, and ends at `reach`
    np.testing.assert_allclose(wps[:3, 7], [0.25, 0.5, 0.6], atol=0.003)
    np.testing.assert_allclose(wps[2], reach, atol=1e-6)
    np.testing.assert_allclose(wps[3], closed, atol=1e-6)  # the gripper motion is one waypoint
    np.testing.assert_allclose(wps[4], press, atol=1e-6)  # the path's last point
    assert len(wps) == 5
    assert (np.abs(np.diff(wps[:, [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12]], axis=0)) <= 0.25 + 0.003).all()


def test_a_path_that_never_moves_has_no_waypoints_and_bad_input_is_refused() -> None:
    assert waypoints_from_path(_hold(HOME, 10)).shape == (0, 14)
    assert waypoints_from_path(HOME[None]).shape == (0, 14)
    with pytest.raises(ValueError, match=r"\[T \+ 1, 14\]"):
        waypoints_from_path(np.zeros((5, 7)))
    with pytest.raises(ValueError, match="max_joint_step"):
        waypoints_from_path(_hold(HOME, 3), max_joint_step=0.0)
