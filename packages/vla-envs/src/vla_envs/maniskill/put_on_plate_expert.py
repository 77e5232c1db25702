"""A scripted expert for the PutOnPlateInScene25 tasks: the WidowX picks the named object and puts it on the plate.

It reads the task's privileged state (the episode's source object and plate poses, the robot's root pose and
the arm controller's end-effector target) and acts through the task's own controller,
`arm_pd_ee_target_delta_pose_align2_gripper_pd_joint_pos`: 7-D actions of end-effector target deltas in the
robot's root frame (metres; a rotation about the root's vertical axis, radians) and a gripper command. Phases:

    above    move over the object at `hover` height, turning the gripper so that its fingers close across the
             object's long axis (the objects lie flat; their long axis is their local x)
    descend  lower to the grasp height (fingertips just above the table)
    close    close the gripper and hold still for `close_steps` decisions
    lift     raise the object straight up to `carry` height
    carry    move over the plate
    lower    lower the object until it is just above the plate
    open     open the gripper (the object drops onto the plate) and hold still

Each phase ends when the controller's target has reached the phase's goal and the measured end effector is
within `tolerance` of it (or the target has stayed there `stall_steps` decisions: the arm is blocked); the expert does not look at the task's success flag. While lifting, carrying or lowering,
an object the fingers no longer hold (the task agent's own grasp check, `lost_steps` decisions in a row) sends the
expert back to `above` with the gripper open: it acts on the state it finds, so it also labels states off its own
path (perturbed demos, `put_on_plate_demos`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

PHASES = ("above", "descend", "close", "lift", "carry", "lower", "open")
# The stand-in WidowX (and the published wx250s) place `ee_gripper_link` half-way along the 4.5 cm fingers: the
# fingertips reach this far beyond it along the gripper's pointing direction.
FINGERTIP_BELOW_EE = 0.0175


@dataclass
class ExpertSettings:
    """Geometry and pace of the scripted expert (metres, radians, decisions).

    Args:
        max_move: Largest end-effector target move per decision, per axis (5 Hz control).
        max_turn: Largest turn about the vertical axis per decision.
        hover: Height of the end effector above the object's top while moving over it.
        carry: Height of the end effector above the table while carrying.
        grasp_clearance: Fingertip height above the table at the grasp.
        release_clearance: Height of the held object's bottom above the plate's top at release.
        tolerance: Distance between the measured end effector and a phase's goal that ends the phase.
        close_steps: Decisions spent closing the gripper; open_steps: decisions spent opening it.
        lost_steps: Decisions in a row without a grasp of the object, while carrying it, that start the pick again.
        stall_steps: Decisions with the target at a phase's goal after which the phase ends even if the measured
            end effector is not within `tolerance` (blocked).
    """

    max_move: float = 0.04
    max_turn: float = 0.5
    hover: float = 0.06
    carry: float = 0.10
    grasp_clearance: float = 0.004
    release_clearance: float = 0.015
    tolerance: float = 0.012
    close_steps: int = 2
    open_steps: int = 2
    lost_steps: int = 2
    stall_steps: int = 3


def _quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """3x3 rotation matrix of a (w, x, y, z) quaternion."""
    w, x, y, z = q / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _wrap_half_turn(angle: float) -> float:
    """`angle` modulo pi, in [-pi/2, pi/2): a gripper closing across an axis is symmetric under a half turn."""
    return (angle + math.pi / 2) % math.pi - math.pi / 2


def _pose(entity: Any) -> tuple[np.ndarray, np.ndarray]:
    """(position [3], rotation matrix [3, 3]) of sub-env 0 of a ManiSkill actor or link pose."""
    pose = entity.pose if hasattr(entity, "pose") else entity
    return pose.p[0].cpu().numpy().astype(np.float64), _quat_to_matrix(
        pose.q[0].cpu().numpy().astype(np.float64)
    )


class PutOnPlateExpert:
    """Scripted pick-and-place on one PutOnPlateInScene25 env (sub-env 0 of the unwrapped task).

    Args:
        settings: Geometry and pace (defaults fit the stand-in pack and the published WidowX).
        gripper_action: How the policy's 7th value is read by the adapter ("threshold": 1 opens, 0 closes;
            "signed": +1 opens, -1 closes), so the recorded actions are what a policy would send.
    """

    def __init__(self, settings: ExpertSettings | None = None, gripper_action: str = "threshold") -> None:
        self.settings = settings or ExpertSettings()
        self.open_value = 1.0
        self.close_value = 0.0 if gripper_action == "threshold" else -1.0
        self.phase = 0
        self._count = 0
        self._lost = 0
        self._table_z: float | None = None

    def reset(self) -> None:
        """Start a new episode (call after the env's reset)."""
        self.phase = 0
        self._count = 0
        self._lost = 0
        self._table_z = None

    @property
    def phase_name(self) -> str:
        return PHASES[min(self.phase, len(PHASES) - 1)]

    def act(self, task: Any) -> np.ndarray:
        """The next action float32 [7] for the unwrapped task env `task` (its current state)."""
        s = self.settings
        root_p, root_r = _pose(task.agent.robot)
        ctrl = task.agent.controller.controllers["arm"]
        target_p = ctrl._target_pose.p[0].cpu().numpy().astype(np.float64)  # root frame
        target_r = _quat_to_matrix(ctrl._target_pose.q[0].cpu().numpy().astype(np.float64))
        ee_p = ctrl.ee_pose_at_base.p[0].cpu().numpy().astype(np.float64)
        obj_p, obj_r = _pose(task.objs[task.source_obj_name])
        plate_p, _ = _pose(task.objs[task.target_obj_name])
        obj_half = task.carrot_bbox_world[0].cpu().numpy().astype(np.float64) / 2  # rotated bbox at reset
        plate_half = task.plate_bbox_world[0].cpu().numpy().astype(np.float64) / 2

        def to_root(p_world: np.ndarray) -> np.ndarray:
            return root_r.T @ (p_world - root_p)

        name = self.phase_name
        if name in ("lift", "carry", "lower"):
            held = bool(task.agent.is_grasping(task.objs[task.source_obj_name])[0])
            self._lost = 0 if held else self._lost + 1
            if self._lost >= s.lost_steps:  # dropped or never picked: open and pick again
                self.phase, self._count, self._lost = PHASES.index("above"), 0, 0
                name = self.phase_name
        if name in ("above", "descend") or self._table_z is None:
            # the object settles on the table after the reset (it is dropped from a few cm): follow it until the
            # grasp, then keep that height
            self._table_z = float(obj_p[2] - obj_half[2])
        table_z = self._table_z
        ee_world_z = {
            "hover": obj_p[2] + obj_half[2] + s.hover,
            "grasp": table_z + FINGERTIP_BELOW_EE + s.grasp_clearance,
            "carry": table_z + s.carry,
        }
        grip = self.open_value
        turn = 0.0
        if name in ("above", "descend"):
            goal_world = np.array([obj_p[0], obj_p[1], ee_world_z["hover" if name == "above" else "grasp"]])
            # fingers open along the gripper's y axis: turn it across the object's long axis (its x)
            obj_axis = root_r.T @ obj_r[:, 0]
            finger_axis = target_r[:, 1]
            want = math.atan2(obj_axis[1], obj_axis[0]) + math.pi / 2
            turn = _wrap_half_turn(want - math.atan2(finger_axis[1], finger_axis[0]))
        elif name == "close":
            goal_world = None
            grip = self.close_value
        elif name in ("lift", "carry"):
            # lift straight up from where the grasp closed (the held object's centre may sit off the fingers' axis,
            # so following it would chase it), then over the plate
            xy = (root_p + root_r @ target_p)[:2] if name == "lift" else plate_p[:2]
            goal_world = np.array([xy[0], xy[1], ee_world_z["carry"]])
            grip = self.close_value
        elif name == "lower":
            plate_top = plate_p[2] + plate_half[2]
            # the object's bottom stays as far below the end effector as it was at the grasp (it sat on the table)
            held_below_ee = ee_world_z["grasp"] - table_z
            goal_world = np.array([plate_p[0], plate_p[1], plate_top + s.release_clearance + held_below_ee])
            grip = self.close_value
        else:  # open
            goal_world = None
        if goal_world is None:
            delta = np.zeros(3)
            self._count += 1
            limit = s.close_steps if name == "close" else s.open_steps
            if self._count >= limit:
                self.phase += 1
                self._count = 0
        else:
            goal = to_root(goal_world)
            delta = np.clip(goal - target_p, -s.max_move, s.max_move)
            turn = float(np.clip(turn, -s.max_turn, s.max_turn))
            reached_target = np.all(np.abs(goal - target_p - delta) < 1e-9) and abs(turn) < 0.05
            # a target held at the goal for `stall_steps` decisions ends the phase too: the arm is blocked (the
            # fingers on the object, the object on the plate's rim) and waiting would not move it
            self._count = self._count + 1 if reached_target else 0
            if reached_target and (np.linalg.norm(goal - ee_p) < s.tolerance or self._count >= s.stall_steps):
                self.phase += 1
                self._count = 0
        action = np.zeros(7, dtype=np.float32)
        action[:3] = delta
        action[5] = turn
        action[6] = grip
        return action
