"""Write a RoboTwin asset root whose robot is a stand-in built from the Franka Panda of the `mani-skill` wheel.

RoboTwin's own robots, objects and textures come from its HuggingFace dataset, which a machine without a
model hub cannot reach. This writes the smallest asset root that RoboTwin's runtime (`rlinf-robotwin-runtime`)
accepts for tasks made of primitive shapes (stack_blocks_two, blocks_ranking_rgb, handover_block):

  <out>/assets/embodiments/piper/   the stand-in robot in the slot of RoboTwin's `piper` arm (RoboTwin's
                                    embodiment table is part of its package, so the stand-in must use a
                                    listed name): ManiSkill's Panda with `panda_joint3` locked, so that each
                                    arm has 6 joints + 1 gripper like RoboTwin's 14-D action/state layout;
                                    `config.yml` in RoboTwin's embodiment format; `curobo_{left,right}_tmp.yml`
                                    placeholders (RoboTwin loads them even with the mplib planner)
  <out>/assets/embodiments/aloha-agilex/, objects/, background_texture/   empty (RoboTwin checks they exist;
                                    use random_background/cluttered_table false)

Usage: python robotwin_standin_assets.py --mani-skill-wheel mani_skill-3.0.1-py3-none-any.whl --out DIR
"""

from __future__ import annotations

import argparse
import shutil
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

PANDA_DIR = "mani_skill/assets/robots/panda/"
URDF, SRDF = "panda_v2.urdf", "panda_v2.srdf"
LOCKED_JOINT = "panda_joint3"  # the Panda's upper-arm roll: held at 0 so each arm is 6-DOF
ARM_JOINTS = ["panda_joint1", "panda_joint2", "panda_joint4", "panda_joint5", "panda_joint6", "panda_joint7"]
# A pose with the hand above the table, pointing down (joint 3 at 0); the gripper opens to 0.04 m per finger.
HOME = [0.0, -0.3, -2.2, 0.0, 1.9, 0.785]

CONFIG_YML = f"""\
# Stand-in robot (ManiSkill's Franka Panda, {LOCKED_JOINT} locked) in RoboTwin's embodiment format.
urdf_path: ./{URDF}
srdf_path: ./{SRDF}
joint_stiffness: 1000
joint_damping: 200
gripper_stiffness: 1000
gripper_damping: 200
move_group: [panda_hand, panda_hand]
ee_joints: [panda_hand_joint, panda_hand_joint]
arm_joints_name: [{ARM_JOINTS}, {ARM_JOINTS}]
gripper_name:
  - base: panda_finger_joint1
    mimic: [[panda_finger_joint2, 1.0, 0.0]]
  - base: panda_finger_joint1
    mimic: [[panda_finger_joint2, 1.0, 0.0]]
gripper_bias: 0.08
gripper_scale: [0.0, 0.04]
homestate: [{HOME}, {HOME}]
robot_pose: [[0, -0.65, 0.74, 0.707107, 0, 0, 0.707107]]  # base at table height, facing the table (+y)
grasp_perfect_direction: [front_right, front_left]
rotate_lim: [0, 0]
static_camera_list:  # the head camera: behind and above the arms, looking at the table centre
  - name: head_camera
    position: [0, -0.45, 1.35]
    forward: [0, 0.6, -0.8]
    left: [-1, 0, 0]
"""
CUROBO_PLACEHOLDER = (
    "# Placeholder: RoboTwin reads this file even when planner_backend is mplib.\nrobot_cfg: {}\n"
)


def lock_joint_in_urdf(text: str) -> str:
    """The URDF with LOCKED_JOINT turned into a fixed joint (at its zero position)."""
    root = ET.fromstring(text)
    joint = next(j for j in root.iter("joint") if j.get("name") == LOCKED_JOINT)
    joint.set("type", "fixed")
    for tag in ("limit", "safety_controller", "dynamics", "axis"):
        for child in joint.findall(tag):
            joint.remove(child)
    return ET.tostring(root, encoding="unicode")


def drop_joint_from_srdf(text: str) -> str:
    """The SRDF without any mention of LOCKED_JOINT (planning groups and named states)."""
    root = ET.fromstring(text)
    for parent in root.iter():
        for child in list(parent):
            if child.tag == "joint" and child.get("name") == LOCKED_JOINT:
                parent.remove(child)
    return ET.tostring(root, encoding="unicode")


def write_asset_root(wheel: Path, out: Path) -> None:
    robot = out / "assets/embodiments/piper"
    if robot.exists():
        shutil.rmtree(robot)
    robot.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith(PANDA_DIR + "franka_description/") and not name.endswith("/"):
                target = robot / name[len(PANDA_DIR) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(name))
        (robot / URDF).write_text(lock_joint_in_urdf(zf.read(PANDA_DIR + URDF).decode()))
        (robot / SRDF).write_text(drop_joint_from_srdf(zf.read(PANDA_DIR + SRDF).decode()))
    (robot / "config.yml").write_text(CONFIG_YML)
    for arm in ("left", "right"):
        (robot / f"curobo_{arm}_tmp.yml").write_text(CUROBO_PLACEHOLDER)
    for d in ("assets/embodiments/aloha-agilex", "assets/objects", "assets/background_texture"):
        (out / d).mkdir(parents=True, exist_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mani-skill-wheel", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    write_asset_root(args.mani_skill_wheel, args.out)
    print(f"[setup_robotwin] stand-in asset root written to {args.out}")


if __name__ == "__main__":
    main()
