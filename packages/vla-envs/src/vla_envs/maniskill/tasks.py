"""ManiSkill3 tasks this adapter supports offline, their language instructions and demo solvers.

ManiSkill's tabletop tasks carry no language instruction, so every supported task gets one here. All tasks
below were created, reset and stepped with `mani-skill==3.0.1` on a machine without network access (their
objects are procedural and the Panda robot ships in the wheel). Tasks that need downloaded assets are
refused with a message saying which assets and how to get them (see `vla_envs.maniskill.assets`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ManiSkillTask:
    """One supported task.

    Attributes:
        env_id: The ManiSkill environment id (`gym.make` name).
        instruction: Natural-language instruction returned in `task_descriptions`.
        solver: Name of the motion-planning solution in `mani_skill.examples.motionplanning.panda.solutions`
            (None: no scripted demonstrations).
    """

    env_id: str
    instruction: str
    solver: str | None = None


TASKS: dict[str, ManiSkillTask] = {
    t.env_id: t
    for t in (
        ManiSkillTask(
            "PickCube-v1", "pick up the red cube and lift it to the goal position", "solvePickCube"
        ),
        ManiSkillTask("PushCube-v1", "push the blue cube onto the red and white target", "solvePushCube"),
        ManiSkillTask("StackCube-v1", "stack the red cube on top of the green cube", "solveStackCube"),
        ManiSkillTask(
            "PegInsertionSide-v1",
            "pick up the peg and insert its orange end into the hole in the box",
            "solvePegInsertionSide",
        ),
        ManiSkillTask("PullCube-v1", "pull the blue cube back onto the target", "solvePullCube"),
        ManiSkillTask(
            "LiftPegUpright-v1",
            "lift the peg lying on the table into an upright position",
            "solveLiftPegUpright",
        ),
        ManiSkillTask("PlaceSphere-v1", "place the blue sphere into the shallow bin", "solvePlaceSphere"),
        ManiSkillTask("PokeCube-v1", "grasp the peg and use it to poke the red cube to the goal", None),
        ManiSkillTask(
            "PullCubeTool-v1",
            "use the L-shaped tool to pull the blue cube closer to the robot",
            "solvePullCubeTool",
        ),
        ManiSkillTask("PlugCharger-v1", "plug the charger into the wall receptacle", "solvePlugCharger"),
        ManiSkillTask("RollBall-v1", "push the blue ball so that it rolls into the goal region", None),
        ManiSkillTask(
            "StackPyramid-v1",
            "place the red cube next to the green cube and stack the blue cube on top of both",
            "solveStackPyramid",
        ),
    )
}


def list_maniskill_tasks() -> list[str]:
    """Task ids this adapter runs: the offline tasks above (each has an instruction) and the reference's
    PutOnPlateInScene25 family (its task code and assets, or the stand-in assets; see `put_on_plate`)."""
    from vla_envs.maniskill.put_on_plate import PUT_ON_PLATE_TASKS

    return sorted(TASKS) + list(PUT_ON_PLATE_TASKS)
