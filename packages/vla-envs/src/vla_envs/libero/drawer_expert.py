"""A scripted expert for the LIBERO tasks whose goal is to close one drawer (`(:goal (And (Close <drawer region>)))`),
measured on LIBERO-90's KITCHEN_SCENE10 and KITCHEN_SCENE5 "close the top drawer of the cabinet"
(`vla_envs.libero.demos.EXPERT_TASKS`). It does not close KITCHEN_SCENE4's bottom drawer: with the fingers pointing
down, the hand meets the middle drawer's handle while the bottom drawer is still about 10 cm open.

It reads privileged simulator state: the drawer's slide joint (named by the goal's region in LIBERO's parsed
problem), the world direction in which that joint closes the drawer, the drawer's collision boxes (its handle is
the front-most of them) and the end effector's site. It acts through LIBERO's OSC_POSE controller: 7-D actions
of end-effector position deltas (an action of 1 asks for `OSC max step` = 5 cm per control step), no rotation,
the gripper closed. Two phases:

    approach  move to the push start: `front` in front of the handle's front face, `above` over its centre
    push      move along the closing direction, `lead` ahead of the end effector's projection on the push line
              (which also pulls the end effector back onto that line), until LIBERO's goal predicate holds

The push height is narrow: at the handle's height the fingers stall against the cabinet's frame, 3.5 cm above it
they pass over the drawer (measured on KITCHEN_SCENE10: 20/20 starts at 2 and 2.5 cm, 4/20 at 3.5 cm).
The expert does not look at the task's success flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

PHASES = ("approach", "push")


@dataclass(frozen=True)
class DrawerExpertSettings:
    """Geometry and pace of the drawer-closing expert (metres).

    Args:
        front: Distance of the push start in front of the handle's front face.
        above: Height of the end effector over the handle's centre while pushing.
        lead: How far ahead of the end effector, along the closing direction, the push aims.
        tolerance: Distance to the push start that ends the approach.
        gain: Action per OSC max step of position error (1: ask for the whole error in one control step).
    """

    front: float = 0.05
    above: float = 0.02
    lead: float = 0.08
    tolerance: float = 0.01
    gain: float = 1.0


def drawer_joint(env: Any) -> str:
    """The slide joint of the drawer a LIBERO env's goal closes.

    Args:
        env: The robosuite env of a LIBERO problem (`OffScreenRenderEnv(...).env`).

    Raises:
        ValueError: the goal is not to close one drawer.
    """
    import mujoco

    goal = env.parsed_problem["goal_state"]
    problem = env.parsed_problem.get("problem_name", "this task")
    closes_one = len(goal) == 1 and len(goal[0]) == 2 and goal[0][0] == "close"
    if not closes_one or goal[0][1] not in env.object_sites_dict:
        raise ValueError(
            f"the LIBERO drawer expert closes one drawer (goal `(Close <drawer region>)`), {problem}'s goal is {goal}"
        )
    joints = list(env.object_sites_dict[goal[0][1]].joints)
    model = env.sim.model._model
    ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in joints]
    if len(ids) != 1 or model.jnt_type[ids[0]] != mujoco.mjtJoint.mjJNT_SLIDE:
        raise ValueError(f"the LIBERO drawer expert needs one slide joint for {goal[0][1]}, got {joints}")
    return joints[0]


class DrawerCloseExpert:
    """Closes the drawer of a LIBERO env's goal from privileged state (module docstring).

    Args:
        env: The robosuite env of a LIBERO problem (`OffScreenRenderEnv(...).env`).
        settings: Geometry and pace.
    """

    def __init__(self, env: Any, settings: DrawerExpertSettings | None = None) -> None:
        import mujoco

        self.env = env
        self.settings = settings or DrawerExpertSettings()
        model = env.sim.model._model
        self.joint = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, drawer_joint(env))
        self.body = int(model.jnt_bodyid[self.joint])
        self.boxes = [
            g
            for g in range(model.ngeom)
            if model.geom_bodyid[g] == self.body
            and model.geom_contype[g]
            and model.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX
        ]
        robot = env.robots[0]
        self.eef_site = robot.eef_site_id
        self.max_step = float(robot.controller.output_max[0])
        self.phase = PHASES[0]
        self.axis = np.zeros(3)
        self.start = np.zeros(3)

    def eef(self) -> np.ndarray:
        """float [3]: the end effector's site position now (world frame)."""
        return np.array(self.env.sim.data._data.site_xpos[self.eef_site])

    def reset(self) -> None:
        """Read the drawer's geometry of the episode's start (call after the env's reset)."""
        model, data = self.env.sim.model._model, self.env.sim.data._data
        # the world direction in which the joint's position grows: LIBERO's drawers close as it grows to 0
        self.axis = data.xmat[self.body].reshape(3, 3) @ model.jnt_axis[self.joint]
        corners = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], dtype=np.float64)
        boxes = []
        for g in self.boxes:
            rotation = data.geom_xmat[g].reshape(3, 3)
            boxes.append(data.geom_xpos[g] + (corners * model.geom_size[g]) @ rotation.T)
        # the handle: the boxes whose centres lie within 3 cm of the front-most one against the closing direction
        centres = np.array([b.mean(0) for b in boxes])
        out = -(centres @ self.axis)
        handle = np.concatenate([b for b, o in zip(boxes, out) if o > out.max() - 0.03])
        centre = handle.mean(0)
        front = float(np.max(-(handle @ self.axis)) + (centre @ self.axis))  # the front face's distance
        s = self.settings
        self.start = centre - self.axis * (front + s.front) + np.array([0.0, 0.0, s.above])
        self.phase = PHASES[0]

    def act(self) -> np.ndarray:
        """float32 [7]: the next action (position delta in [-1, 1], no rotation, gripper closed)."""
        s = self.settings
        eef = self.eef()
        if self.phase == "approach" and np.linalg.norm(self.start - eef) < s.tolerance:
            self.phase = "push"
        if self.phase == "approach":
            target = self.start
        else:
            target = self.start + self.axis * (float((eef - self.start) @ self.axis) + s.lead)
        action = np.zeros(7, dtype=np.float32)
        action[:3] = np.clip(s.gain * (target - eef) / self.max_step, -1.0, 1.0)
        action[6] = 1.0
        return action
