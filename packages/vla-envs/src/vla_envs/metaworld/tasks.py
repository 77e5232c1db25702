"""MetaWorld task names, task sets and one natural-language instruction per task.

Kept as plain data (no simulator import) so that tasks can be listed and configs validated without MetaWorld
installed; `tests/test_metaworld_tasks.py` checks these lists against metaworld's own `env_dict`.
"""

from __future__ import annotations

TASK_DESCRIPTIONS: dict[str, str] = {
    "assembly-v3": "pick up the nut and place it onto the peg",
    "basketball-v3": "pick up the ball and dunk it into the basket",
    "bin-picking-v3": "pick up the puck from one bin and place it into the other bin",
    "box-close-v3": "pick up the lid and place it on top of the box",
    "button-press-topdown-v3": "press the button from the top",
    "button-press-topdown-wall-v3": "press the button behind the wall from the top",
    "button-press-v3": "press the button facing the robot",
    "button-press-wall-v3": "press the button behind the wall",
    "coffee-button-v3": "push the button on the coffee machine",
    "coffee-pull-v3": "pull the mug away from the coffee machine",
    "coffee-push-v3": "push the mug under the coffee machine",
    "dial-turn-v3": "rotate the dial 180 degrees",
    "disassemble-v3": "pick the nut off the peg",
    "door-close-v3": "close the door",
    "door-lock-v3": "lock the door by turning the lock down",
    "door-open-v3": "open the door",
    "door-unlock-v3": "unlock the door by turning the lock up",
    "hand-insert-v3": "insert the gripper into the hole",
    "drawer-close-v3": "push the drawer closed",
    "drawer-open-v3": "pull the drawer open",
    "faucet-open-v3": "rotate the faucet handle to the left to open it",
    "faucet-close-v3": "rotate the faucet handle to the right to close it",
    "hammer-v3": "pick up the hammer and hammer the nail into the wall",
    "handle-press-side-v3": "press the handle down sideways",
    "handle-press-v3": "press the handle down",
    "handle-pull-side-v3": "pull the handle up sideways",
    "handle-pull-v3": "pull the handle up",
    "lever-pull-v3": "pull the lever up",
    "pick-place-wall-v3": "pick up the puck and place it at the goal behind the wall",
    "pick-out-of-hole-v3": "pick the puck up out of the hole",
    "pick-place-v3": "pick up the puck and place it at the goal",
    "plate-slide-v3": "slide the plate into the cabinet",
    "plate-slide-side-v3": "slide the plate sideways into the cabinet",
    "plate-slide-back-v3": "slide the plate back out of the cabinet",
    "plate-slide-back-side-v3": "slide the plate sideways out of the cabinet",
    "peg-insert-side-v3": "insert the peg sideways into the hole",
    "peg-unplug-side-v3": "unplug the peg sideways from the hole",
    "soccer-v3": "kick the ball into the goal",
    "stick-push-v3": "grasp the stick and push the box with it",
    "stick-pull-v3": "grasp the stick and pull the box with it",
    "push-v3": "push the puck to the goal",
    "push-wall-v3": "push the puck around the wall to the goal",
    "push-back-v3": "push the puck back to the goal",
    "reach-v3": "reach the goal position",
    "reach-wall-v3": "reach the goal position behind the wall",
    "shelf-place-v3": "pick up the puck and place it onto the shelf",
    "sweep-into-v3": "sweep the puck into the hole",
    "sweep-v3": "sweep the puck off the table",
    "window-open-v3": "push the window open",
    "window-close-v3": "push the window closed",
}

ALL_TASKS: list[str] = list(TASK_DESCRIPTIONS)

MT10_TASKS: list[str] = [
    "reach-v3",
    "push-v3",
    "pick-place-v3",
    "door-open-v3",
    "drawer-open-v3",
    "drawer-close-v3",
    "button-press-topdown-v3",
    "peg-insert-side-v3",
    "window-open-v3",
    "window-close-v3",
]

ML45_TEST_TASKS: list[str] = [
    "bin-picking-v3",
    "box-close-v3",
    "hand-insert-v3",
    "door-lock-v3",
    "door-unlock-v3",
]
ML45_TRAIN_TASKS: list[str] = [t for t in ALL_TASKS if t not in ML45_TEST_TASKS]

# The difficulty groups of the 50 tasks (28 easy, 11 medium, 6 hard, 5 very hard), as published in the appendix of
# Seo et al., "Masked World Models for Visual Control", CoRL 2022 (after Seo et al., "Reinforcement Learning with
# Action-Free Pre-Training from Videos", ICML 2022). The MetaWorld result table of the reference documents (Easy,
# Medium, Hard, Very Hard, Avg.) reports success per group in this grouping; its Avg. is the mean of the 4 groups.
DIFFICULTY_GROUPS: dict[str, list[str]] = {
    "easy": [
        "button-press-v3",
        "button-press-topdown-v3",
        "button-press-topdown-wall-v3",
        "button-press-wall-v3",
        "coffee-button-v3",
        "dial-turn-v3",
        "door-close-v3",
        "door-lock-v3",
        "door-open-v3",
        "door-unlock-v3",
        "drawer-close-v3",
        "drawer-open-v3",
        "faucet-close-v3",
        "faucet-open-v3",
        "handle-press-v3",
        "handle-press-side-v3",
        "handle-pull-v3",
        "handle-pull-side-v3",
        "lever-pull-v3",
        "plate-slide-v3",
        "plate-slide-back-v3",
        "plate-slide-back-side-v3",
        "plate-slide-side-v3",
        "reach-v3",
        "reach-wall-v3",
        "window-close-v3",
        "window-open-v3",
        "peg-unplug-side-v3",
    ],
    "medium": [
        "basketball-v3",
        "bin-picking-v3",
        "box-close-v3",
        "coffee-pull-v3",
        "coffee-push-v3",
        "hammer-v3",
        "peg-insert-side-v3",
        "push-wall-v3",
        "soccer-v3",
        "sweep-v3",
        "sweep-into-v3",
    ],
    "hard": [
        "assembly-v3",
        "hand-insert-v3",
        "pick-out-of-hole-v3",
        "pick-place-v3",
        "push-v3",
        "push-back-v3",
    ],
    "very_hard": [
        "shelf-place-v3",
        "disassemble-v3",
        "stick-pull-v3",
        "stick-push-v3",
        "pick-place-wall-v3",
    ],
}
#: How the reference table titles each group.
DIFFICULTY_LABELS: dict[str, str] = {
    "easy": "Easy",
    "medium": "Medium",
    "hard": "Hard",
    "very_hard": "Very Hard",
}


def difficulty_group(task: str) -> str:
    """The difficulty group (`DIFFICULTY_GROUPS` key) of a MetaWorld task name.

    Raises:
        ValueError: unknown task (the message lists the valid ones).
    """
    for group, tasks in DIFFICULTY_GROUPS.items():
        if task in tasks:
            return group
    raise ValueError(f"unknown metaworld task {task!r}; valid tasks: {ALL_TASKS}")


# name -> (tasks, goal observable in the state vector).  MT sets show the goal, ML sets hide it (as metaworld).
TASK_SETS: dict[str, tuple[list[str], bool]] = {
    "MT10": (MT10_TASKS, True),
    "MT50": (ALL_TASKS, True),
    "ML45-train": (ML45_TRAIN_TASKS, False),
    "ML45-test": (ML45_TEST_TASKS, False),
}


def list_metaworld_tasks() -> list[str]:
    """The 50 MetaWorld v3 task names."""
    return list(ALL_TASKS)


def resolve_tasks(task: str | None, task_set: str | list[str] | None) -> tuple[list[str], bool]:
    """Turn `EnvConfig.task` / `task_set` into (task names, goal_observable).

    Raises:
        ValueError: unknown task or task set (the message lists the valid ones).
    """
    if task is None and task_set is None:
        raise ValueError(
            f"metaworld needs EnvConfig.task (one of {ALL_TASKS}) or task_set (one of {list(TASK_SETS)})"
        )
    if task is not None:
        tasks, observable = [task], True
    elif isinstance(task_set, str):
        if task_set.startswith("MT1:"):
            tasks, observable = [task_set[4:]], True
        elif task_set in TASK_SETS:
            tasks, observable = TASK_SETS[task_set]
        else:
            raise ValueError(
                f"EnvConfig.task_set={task_set!r} is unknown; valid task sets: {list(TASK_SETS)}, "
                "'MT1:<task>' or a list of task names"
            )
    else:
        tasks, observable = list(task_set or []), True
        if not tasks:
            raise ValueError("EnvConfig.task_set is an empty list")
    unknown = [t for t in tasks if t not in TASK_DESCRIPTIONS]
    if unknown:
        raise ValueError(f"unknown metaworld task(s) {unknown}; valid tasks: {ALL_TASKS}")
    return list(tasks), observable
