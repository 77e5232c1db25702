"""Functions run inside the RoboTwin process by test_robotwin_real.py (`RoboTwinProcess.run`): they arrange
scenes with SAPIEN so that RoboTwin's own `check_success` can decide, and read RoboTwin's state."""

from __future__ import annotations

import numpy as np
import sapien


def _move(actor, position) -> None:
    actor.actor.set_pose(sapien.Pose(np.asarray(position, dtype=np.float64), actor.get_pose().q))


def arrange_success(venv, row: int) -> str:
    """Put the objects of env `row` where its task counts as done (the arms do not move)."""
    task = venv.envs[row].task
    name = type(task).__name__
    if name == "stack_blocks_two":
        p = task.block1.get_pose().p
        _move(task.block2, [p[0], p[1], p[2] + 0.05])  # the green block on the red one (blocks are 5 cm)
    elif name == "blocks_ranking_rgb":
        y, z = task.block1.get_pose().p[1], task.block1.get_pose().p[2]
        for i, block in enumerate((task.block1, task.block2, task.block3)):  # red, green, blue from left
            _move(block, [-0.1 + 0.1 * i, y, z])
    elif name == "handover_block":
        target = task.target_box.get_functional_point(1, "pose").p
        offset = task.box.get_pose().p - task.box.get_functional_point(0, "pose").p
        _move(task.box, target + offset)  # the block on the blue pad
    else:
        raise ValueError(f"no arrangement for {name}")
    return name


def scene_of_instruction(venv, row: int) -> dict:
    """The scene description RoboTwin built env `row`'s instruction from, and the description of its scene now."""
    sub = venv.envs[row]
    return {
        "used": sub.episode_info_list[0],
        "actual": sub.task.get_info(),
        "instruction": str(sub.instruction),
    }
