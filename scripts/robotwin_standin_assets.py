"""Write a RoboTwin asset root whose robot is a stand-in built from the Franka Panda of the `mani-skill` wheel, with
stand-in staplers.

RoboTwin's own robots, objects and textures come from its HuggingFace dataset, which a machine without a
model hub cannot reach. This writes the smallest asset root that RoboTwin's runtime (`rlinf-robotwin-runtime`)
accepts for tasks made of primitive shapes (stack_blocks_two, blocks_ranking_rgb, handover_block) and for
press_stapler:

  <out>/assets/embodiments/piper/   the stand-in robot in the slot of RoboTwin's `piper` arm (RoboTwin's
                                    embodiment table is part of its package, so the stand-in must use a
                                    listed name): ManiSkill's Panda with `panda_joint3` locked, so that each
                                    arm has 6 joints + 1 gripper like RoboTwin's 14-D action/state layout;
                                    `config.yml` in RoboTwin's embodiment format; `curobo_{left,right}_tmp.yml`
                                    placeholders (RoboTwin loads them even with the mplib planner)
  <out>/assets/objects/048_stapler/ seven stand-in staplers (`base{i}.glb` + `model_data{i}.json`): a base plate
                                    and a coloured top arm, with RoboTwin's contact points (2: the press point)
  <out>/assets/embodiments/aloha-agilex/, background_texture/   empty (RoboTwin checks they exist; use
                                    random_background/cluttered_table false)

RoboTwin's frame conventions, which its experts (`play_once`) plan with: an end-effector frame whose x axis points
along the fingers (the approach direction), whose y axis is the fingers' closing axis, and whose tool centre point
(TCP) lies `gripper_bias` metres along x from the `ee_joints` origin. `_trans_endpose` reads the pose as
`R(ee joint) @ global_trans_matrix @ delta_matrix`, and planning targets the `move_group` link at
`R(target) @ inv(delta_matrix)`. For the Panda the ee joint's frame is the hand's turned half a turn about x
(`GLOBAL_TRANS`), and the hand's z axis is the approach axis, its y axis the fingers' axis (`DELTA`); the TCP is
the Panda's own (`panda_hand_tcp`, 0.1034 m from the hand).

`--visuals lowpoly` draws every link with its collision mesh (about 250 triangles per link instead of 12,000-22,000):
the same bodies, joints, collision shapes and masses, so states, rewards and success are those of the full visuals;
only the pictures differ.

Usage: python robotwin_standin_assets.py --mani-skill-wheel mani_skill-3.0.1-py3-none-any.whl --out DIR
       [--visuals full|lowpoly]
"""

from __future__ import annotations

import argparse
import copy
import json
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
# RoboTwin's end-effector frame from the Panda's (module docstring): ee joint frame -> hand frame, hand frame ->
# RoboTwin's (x: approach = hand z, y: finger axis = -hand y, z = hand x).
GLOBAL_TRANS = [[1, 0, 0], [0, -1, 0], [0, 0, -1]]
DELTA = [[0, 0, 1], [0, -1, 0], [1, 0, 0]]
TCP = 0.1034  # panda_hand_tcp: the point between the finger pads, from the hand's origin along its z axis
VISUALS = ("full", "lowpoly")
LOWPOLY_RGBA = "0.85 0.85 0.85 1"

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
gripper_bias: {TCP}
gripper_scale: [0.0, 0.04]
global_trans_matrix: {GLOBAL_TRANS}
delta_matrix: {DELTA}
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

# Stand-in staplers (RoboTwin's 048_stapler, models 0-6: colours as its object descriptions name them). A model's
# frame is y-up (RoboTwin turns it upright with the quaternion [0.5, 0.5, 0.5, 0.5]), x along the stapler, origin at
# the bottom centre. Sizes in metres: length, base plate height, top arm height, width.
STAPLER_COLOURS = [
    (0.10, 0.25, 0.80),
    (0.08, 0.08, 0.08),
    (0.15, 0.35, 0.85),
    (0.55, 0.55, 0.58),
    (0.80, 0.10, 0.10),
    (0.85, 0.15, 0.12),
    (0.05, 0.45, 0.95),
]
STAPLER_BASE_RGB = (0.70, 0.70, 0.72)
STAPLER_LENGTHS = [0.14, 0.13, 0.12, 0.14, 0.15, 0.12, 0.13]
STAPLER_PLATE, STAPLER_ARM, STAPLER_WIDTH = 0.012, 0.028, 0.04
# The press point (contact point 2) lies this far below the top arm's upper face: press_stapler's expert ends with
# the TCP 0.02 m above it, so the closed fingertips (0.0095 m beyond the TCP) press 1 cm into the top.
PRESS_DEPTH = 0.02


def lock_joint_in_urdf(text: str) -> str:
    """The URDF with LOCKED_JOINT turned into a fixed joint (at its zero position)."""
    root = ET.fromstring(text)
    joint = next(j for j in root.iter("joint") if j.get("name") == LOCKED_JOINT)
    joint.set("type", "fixed")
    for tag in ("limit", "safety_controller", "dynamics", "axis"):
        for child in joint.findall(tag):
            joint.remove(child)
    return ET.tostring(root, encoding="unicode")


def lowpoly_visuals(text: str) -> str:
    """The URDF with every link drawn by its collision shapes (same origins and geometry) in one light grey."""
    root = ET.fromstring(text)
    for link in root.iter("link"):
        for visual in link.findall("visual"):
            link.remove(visual)
        for collision in link.findall("collision"):
            visual = ET.SubElement(link, "visual")
            for child in collision:
                visual.append(copy.deepcopy(child))
            material = ET.SubElement(visual, "material", name="standin_grey")
            ET.SubElement(material, "color", rgba=LOWPOLY_RGBA)
    return ET.tostring(root, encoding="unicode")


def drop_joint_from_srdf(text: str) -> str:
    """The SRDF without any mention of LOCKED_JOINT (planning groups and named states)."""
    root = ET.fromstring(text)
    for parent in root.iter():
        for child in list(parent):
            if child.tag == "joint" and child.get("name") == LOCKED_JOINT:
                parent.remove(child)
    return ET.tostring(root, encoding="unicode")


def _top_down(x: float, y: float) -> list[list[float]]:
    """A contact point at (x, y, 0) of a y-up model whose grasp approaches from above (RoboTwin's contact frame:
    its y axis points against the approach), fingers closing across the model's width (z)."""
    return [[1, 0, 0, x], [0, 1, 0, y], [0, 0, 1, 0], [0, 0, 0, 1]]


def stapler_model_data(length: float) -> dict:
    """RoboTwin's model_data for a stand-in stapler of `length` (points in metres, scale 1)."""
    top = STAPLER_PLATE + STAPLER_ARM
    return {
        "center": [0.0, top / 2, 0.0],
        "extents": [length, top, STAPLER_WIDTH],
        "scale": [1.0, 1.0, 1.0],
        "contact_points_pose": [
            _top_down(-0.3 * length, top / 2),  # 0: grasp at the back
            _top_down(0.3 * length, top / 2),  # 1: grasp at the front
            _top_down(0.2 * length, top - PRESS_DEPTH),  # 2: the press point, under the head
        ],
        "contact_points_group": [[0, 1], [2]],
        "contact_points_mask": [True, False],
        "contact_points_description": [
            "back of the stapler",
            "front of the stapler",
            "top of the stapler's head",
        ],
        "target_pose": [[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]],
        "functional_matrix": [[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]],
        "transform_matrix": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
    }


def write_stapler(glb: Path, length: float, rgb: tuple[float, float, float]) -> None:
    """A base plate and a top arm (two boxes, one convex collision each) as a glb file."""
    import trimesh
    from trimesh.visual import TextureVisuals
    from trimesh.visual.material import PBRMaterial

    def box(extents: list[float], centre: list[float], colour: tuple[float, float, float]) -> trimesh.Trimesh:
        mesh = trimesh.creation.box(extents=extents)
        mesh.apply_translation(centre)
        rgba = [round(255 * c) for c in colour] + [255]
        mesh.visual = TextureVisuals(material=PBRMaterial(baseColorFactor=rgba, roughnessFactor=0.6))
        return mesh

    scene = trimesh.Scene()
    scene.add_geometry(
        box([length, STAPLER_PLATE, STAPLER_WIDTH], [0, STAPLER_PLATE / 2, 0], STAPLER_BASE_RGB),
        node_name="base",
    )
    arm = [0.95 * length, STAPLER_ARM, 0.85 * STAPLER_WIDTH]
    scene.add_geometry(box(arm, [0.0, STAPLER_PLATE + STAPLER_ARM / 2, 0.0], rgb), node_name="top")
    glb.write_bytes(scene.export(file_type="glb"))


def write_asset_root(wheel: Path, out: Path, visuals: str = "full") -> None:
    if visuals not in VISUALS:
        raise ValueError(f"visuals={visuals!r}: one of {VISUALS}")
    robot = out / "assets/embodiments/piper"
    if robot.exists():
        shutil.rmtree(robot)
    robot.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith(PANDA_DIR + "franka_description/") and not name.endswith("/"):
                if visuals == "lowpoly" and "/meshes/visual/" in name:
                    continue
                target = robot / name[len(PANDA_DIR) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(name))
        urdf = lock_joint_in_urdf(zf.read(PANDA_DIR + URDF).decode())
        (robot / URDF).write_text(lowpoly_visuals(urdf) if visuals == "lowpoly" else urdf)
        (robot / SRDF).write_text(drop_joint_from_srdf(zf.read(PANDA_DIR + SRDF).decode()))
    (robot / "config.yml").write_text(CONFIG_YML)
    for arm in ("left", "right"):
        (robot / f"curobo_{arm}_tmp.yml").write_text(CUROBO_PLACEHOLDER)
    stapler = out / "assets/objects/048_stapler"
    if stapler.exists():
        shutil.rmtree(stapler)
    stapler.mkdir(parents=True)
    for i, (length, rgb) in enumerate(zip(STAPLER_LENGTHS, STAPLER_COLOURS)):
        write_stapler(stapler / f"base{i}.glb", length, rgb)
        (stapler / f"model_data{i}.json").write_text(json.dumps(stapler_model_data(length), indent=1))
    for d in ("assets/embodiments/aloha-agilex", "assets/objects", "assets/background_texture"):
        (out / d).mkdir(parents=True, exist_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mani-skill-wheel", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--visuals", choices=VISUALS, default="full")
    args = parser.parse_args()
    write_asset_root(args.mani_skill_wheel, args.out, args.visuals)
    print(f"[setup_robotwin] stand-in asset root ({args.visuals} visuals) written to {args.out}")


if __name__ == "__main__":
    main()
