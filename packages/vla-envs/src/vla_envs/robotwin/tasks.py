"""The RoboTwin 2.0 tasks supported through RoboTwin's vector env (46 of 50), with their descriptions.

Plain data (no simulator import), from the RoboTwin reference document. The four tasks RoboTwin's vector env
does not support yet are listed separately so that asking for one gives a clear error.
"""

from __future__ import annotations

# The tasks whose RoboTwin code builds a dense reward (`self.reward`, a tree of RoboTwin's reward terms: reaching,
# grasping, placing, stacking, ranking; rlinf-robotwin-runtime 0.1.3); `reward_mode: dense` pays it.
DENSE_REWARD_TASKS: tuple[str, ...] = (
    "adjust_bottle", "beat_block_hammer", "blocks_ranking_rgb", "blocks_ranking_size", "click_alarmclock",
    "click_bell", "pick_diverse_bottles", "pick_dual_bottles", "place_a2b_left", "place_a2b_right",
    "place_bread_skillet", "place_dual_shoes", "place_empty_cup", "place_shoe", "stack_blocks_three",
    "stack_blocks_two", "stack_bowls_three", "stack_bowls_two",
)  # fmt: skip

TASK_DESCRIPTIONS: dict[str, str] = {
    # placement
    "adjust_bottle": "Pick up the bottle on the table headup with the correct arm.",
    "place_a2b_left": "Use appropriate arm to place object A on the left of object B.",
    "place_a2b_right": "Use appropriate arm to place object A on the right of object B.",
    "place_bread_basket": "Put the bread on the table into the basket (two breads: both arms at once).",
    "place_bread_skillet": "Use one arm to grab the bread on the table and put it into the skillet.",
    "place_burger_fries": "Use dual arm to pick the hamburg and frenchfries and put them onto the tray.",
    "place_can_basket": "Pick up the can, put it into the basket, and use another arm to lift the basket.",
    "place_cans_plasticbox": "Use dual arm to pick and place cans into plasticbox.",
    "place_container_plate": "Place the container onto the plate.",
    "place_empty_cup": "Use an arm to place the empty cup on the coaster.",
    "place_mouse_pad": "Grab the mouse and place it on a colored mat.",
    "place_object_basket": "Put the target object in the basket, then grab the basket and move it slightly away.",
    "place_object_stand": "Use appropriate arm to place the object on the stand.",
    "place_phone_stand": "Pick up the phone and put it on the phone stand.",
    "place_shoe": "Use one arm to grab the shoe from the table and place it on the mat.",
    "place_dual_shoes": "Use both arms to put the two shoes in the shoebox, with the shoe tip pointing to the left.",
    # pick
    "pick_dual_bottles": "Pick up one bottle with one arm, and pick up another bottle with the other arm.",
    "pick_diverse_bottles": "Pick up one bottle with one arm, and pick up another bottle with the other arm.",
    "move_can_pot": "Use one arm to pick up the can and move it to beside the pot.",
    "move_pillbottle_pad": "Use one arm to pick the pillbottle and place it onto the pad.",
    "move_playingcard_away": "Pick up the playing card and move it away from the table.",
    "move_stapler_pad": "Use appropriate arm to move the stapler to a colored mat.",
    "grab_roller": "Use both arms to grab the roller on the table.",
    "lift_pot": "Use arms to lift the pot.",
    "put_bottles_dustbin": "Use arms to grab the bottles and put them into the dustbin to the left of the table.",
    # stacking
    "stack_blocks_two": "Stack the green block on the red block.",
    "stack_blocks_three": "Stack the blue block on the green block, and then stack the green block on the red block.",
    "stack_bowls_two": "Stack the two bowls on top of each other.",
    "stack_bowls_three": "Stack the three bowls on top of each other.",
    # ranking
    "blocks_ranking_rgb": "Arrange the blocks in the order of red, green, and blue from left to right.",
    "blocks_ranking_size": "Arrange the blocks from largest to smallest, from left to right.",
    # tool use and interaction
    "click_alarmclock": "Click the alarm clock's center of the top side button on the table.",
    "click_bell": "Click the bell's top center on the table.",
    "beat_block_hammer": "Grab the hammer and hit the block.",
    "open_microwave": "Use one arm to open the microwave.",
    "press_stapler": "Use one arm to press the stapler.",
    "stamp_seal": "Grab the stamp and stamp onto the specific color mat.",
    "turn_switch": "Use the robotic arm to click the switch.",
    # handover
    "handover_block": "Grasp the red block with the left arm, hand it over to the right arm, place it on the blue pad.",
    "handover_mic": "Use one arm to grasp the microphone and handover it to the other arm.",
    # pouring, dumping and shaking
    "shake_bottle": "Shake the bottle with proper arm.",
    "shake_bottle_horizontally": "Shake the bottle horizontally with proper arm.",
    "dump_bin_bigbin": "Grab the small bin and pour the balls into the big bin.",
    # hanging and special
    "hanging_mug": "Pick up the mug with the left arm, then with the right arm hang it onto the rack.",
    "scan_object": "Hold the scanner with one arm and the object with the other, and complete the scanning.",
    "rotate_qrcode": "Pick up the QR code board and rotate it so that the QR code faces the robot.",
}

SUPPORTED_TASKS: list[str] = list(TASK_DESCRIPTIONS)
UNSUPPORTED_TASKS: tuple[str, ...] = ("place_fan", "open_laptop", "place_object_scale", "put_object_cabinet")


def list_robotwin_tasks() -> list[str]:
    """The 46 RoboTwin 2.0 tasks supported by the adapter."""
    return list(SUPPORTED_TASKS)


def check_task(name: str) -> str:
    """Return `name` if it is a supported task.

    Raises:
        ValueError: an unsupported or unknown task (the message says which and lists the supported ones).
    """
    if name in UNSUPPORTED_TASKS:
        raise ValueError(
            f"RoboTwin task {name!r} is not supported by RoboTwin's vector env yet (unsupported: "
            f"{list(UNSUPPORTED_TASKS)}); supported tasks: {SUPPORTED_TASKS}"
        )
    if name not in TASK_DESCRIPTIONS:
        raise ValueError(f"unknown RoboTwin task {name!r}; supported tasks: {SUPPORTED_TASKS}")
    return name
