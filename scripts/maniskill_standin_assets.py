"""Write a stand-in asset pack for the PutOnPlateInScene25 ManiSkill tasks of the reference framework.

The task code (`rlinf/envs/maniskill/tasks/`, package `rlinf==0.3.0`) opens assets that normally come from
a model hub (the `bridge_v2_real2sim` table stage, the WidowX 250s robot, RLinf's carrots, plates and table
overlays). A machine without a hub gets, from this script, files with the same layout, written here from
primitive shapes:

  <out>/data/tasks/bridge_v2_real2sim_dataset/stages/bridge_table_1_v1.glb
        a flat table (top at z = 0.868 m in the task's world frame, after the task's own stage pose)
  <out>/data/robots/widowx/wx250s.urdf
        a WidowX 250s with the link and joint names, joint axes, offsets and limits of the published
        Interbotix wx250s description; boxes stand in for the meshes (collision = visual)
  <out>/carrot/more_carrot/model_db.json + <id>/{collision,textured}.obj (+ textured.mtl)
        25 graspable objects (bars and hexagonal prisms; index 0 is an orange "carrot")
  <out>/carrot/more_plate/model_db.json + <id>/...   17 plates (flat discs; index 0 is a white "plate")
  <out>/carrot/more_table/model_db.json, imgs/, textures/   21 plain overlay images and textures, 640 x 480
  <out>/standin.json   says that this is a stand-in pack and which script version wrote it

Point both variables at <out>: `MS_ASSET_DIR=<out>` (ManiSkill reads `$MS_ASSET_DIR/data`) and
`MANISKILL_ASSET_DIR=<out>` (the task code reads `$MANISKILL_ASSET_DIR/carrot`). Users with the real assets
point the same variables at those instead.

Usage: python scripts/maniskill_standin_assets.py --out DIR [--force]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
from pathlib import Path

import numpy as np

PACK_VERSION = 3
NUM_CARROTS, NUM_PLATES, NUM_OVERLAYS = 25, 17, 21
OVERLAY_HW = (480, 640)

# --- table stage -------------------------------------------------------------------------------------------
# The task places the stage with pose q = (0.707, 0.707, 0, 0) (+90 deg about x: file y -> world z, file
# z -> world -y) and position (2.0634, 2.8313, 0). The table's world extent:
TABLE_TOP_Z = 0.868  # the WidowX base sits at z = 0.870 and the objects drop from z = 0.90
TABLE_WORLD_MIN = (-1.2, -1.0, TABLE_TOP_Z - 0.10)
TABLE_WORLD_MAX = (0.8, 1.0, TABLE_TOP_Z)
STAGE_OFFSET = (2.0634, 2.8313, 0.0)

# --- WidowX 250s (Interbotix wx250s kinematics) ------------------------------------------------------------
# (joint, type, parent, child, origin xyz, axis, (lower, upper))
WX250S_JOINTS = [
    ("waist", "revolute", "base_link", "shoulder_link", (0, 0, 0.072), (0, 0, 1), (-math.pi, math.pi)),
    (
        "shoulder",
        "revolute",
        "shoulder_link",
        "upper_arm_link",
        (0, 0, 0.03865),
        (0, 1, 0),
        (-1.8849556, 1.9896754),
    ),
    (
        "elbow",
        "revolute",
        "upper_arm_link",
        "upper_forearm_link",
        (0.04975, 0, 0.25),
        (0, 1, 0),
        (-2.146755, 1.6057029),
    ),
    (
        "forearm_roll",
        "revolute",
        "upper_forearm_link",
        "lower_forearm_link",
        (0.175, 0, 0),
        (1, 0, 0),
        (-math.pi, math.pi),
    ),
    (
        "wrist_angle",
        "revolute",
        "lower_forearm_link",
        "wrist_link",
        (0.075, 0, 0),
        (0, 1, 0),
        (-1.7453293, 2.146755),
    ),
    ("wrist_rotate", "revolute", "wrist_link", "gripper_link", (0.065, 0, 0), (1, 0, 0), (-math.pi, math.pi)),
    ("ee_arm", "fixed", "gripper_link", "ee_arm_link", (0.043, 0, 0), None, None),
    ("gripper", "fixed", "ee_arm_link", "gripper_prop_link", (0.0055, 0, 0), None, None),
    ("gripper_bar", "fixed", "ee_arm_link", "gripper_bar_link", (0, 0, 0), None, None),
    ("ee_bar", "fixed", "gripper_bar_link", "fingers_link", (0.023, 0, 0), None, None),
    ("left_finger", "prismatic", "fingers_link", "left_finger_link", (0, 0, 0), (0, 1, 0), (0.015, 0.037)),
    ("right_finger", "prismatic", "fingers_link", "right_finger_link", (0, 0, 0), (0, -1, 0), (0.015, 0.037)),
    ("ee_gripper", "fixed", "fingers_link", "ee_gripper_link", (0.027575, 0, 0), None, None),
]
# link -> (mass kg, [(box size xyz, box centre xyz), ...], rgba); boxes approximate the published meshes.
_DARK, _GREY = (0.15, 0.15, 0.15, 1.0), (0.35, 0.35, 0.38, 1.0)
WX250S_LINKS = {
    "base_link": (0.54, [((0.13, 0.12, 0.07), (-0.01, 0, 0.035))], _DARK),
    "shoulder_link": (0.48, [((0.07, 0.07, 0.04), (0, 0, 0.015))], _DARK),
    "upper_arm_link": (
        0.43,
        [((0.04, 0.04, 0.25), (0, 0, 0.125)), ((0.06, 0.04, 0.04), (0.02, 0, 0.25))],
        _GREY,
    ),
    "upper_forearm_link": (0.26, [((0.175, 0.035, 0.035), (0.0875, 0, 0))], _GREY),
    "lower_forearm_link": (0.16, [((0.075, 0.03, 0.03), (0.0375, 0, 0))], _DARK),
    "wrist_link": (0.08, [((0.065, 0.03, 0.03), (0.0325, 0, 0))], _GREY),
    "gripper_link": (0.12, [((0.043, 0.05, 0.03), (0.0215, 0, 0))], _DARK),
    "ee_arm_link": (0.001, [], _DARK),
    "gripper_prop_link": (0.004, [], _DARK),
    "gripper_bar_link": (0.034, [((0.01, 0.10, 0.02), (0.005, 0, 0))], _DARK),
    "fingers_link": (0.001, [], _DARK),
    "left_finger_link": (0.016, [((0.045, 0.008, 0.02), (0.0225, 0.004, 0))], _GREY),
    "right_finger_link": (0.016, [((0.045, 0.008, 0.02), (0.0225, -0.004, 0))], _GREY),
    "ee_gripper_link": (0.001, [], _DARK),
}

# --- objects ------------------------------------------------------------------------------------------------
_COLOURS = {
    "orange": (0.95, 0.45, 0.08),
    "red": (0.80, 0.10, 0.10),
    "green": (0.15, 0.60, 0.20),
    "yellow": (0.95, 0.85, 0.15),
    "purple": (0.50, 0.20, 0.60),
    "blue": (0.15, 0.30, 0.85),
    "brown": (0.50, 0.30, 0.15),
    "pink": (0.95, 0.55, 0.70),
    "white": (0.92, 0.92, 0.90),
    "black": (0.12, 0.12, 0.12),
    "grey": (0.55, 0.55, 0.55),
    "cyan": (0.10, 0.75, 0.80),
}


# The WidowX fingers close to a 2.8 cm gap (finger joints at their 0.014 m lower target) and squeeze with a force
# that grows with how far short of that target they stop (gripper stiffness 1000 N/m): objects 3.6-4.8 cm wide
# are held with 4-10 N and stay in the hand while it carries them; narrower ones slip out.
OBJECT_WIDTH_RANGE = (0.036, 0.048)


def carrot_specs() -> list[dict]:
    """25 graspable objects: id, instruction name, shape, length, width, colour (deterministic)."""
    colours = [c for c in _COLOURS if c not in ("white",)]
    specs = [
        {
            "id": "standin_carrot_00",
            "name": "carrot",
            "shape": "prism",
            "length": 0.11,
            "width": 0.04,
            "colour": "orange",
        }
    ]
    names = {"carrot"}
    lo_w, hi_w = OBJECT_WIDTH_RANGE
    for i in range(1, NUM_CARROTS):
        colour = colours[(i * 5) % len(colours)]
        shape = "bar" if i % 2 else "prism"
        name = f"{colour} {'bar' if shape == 'bar' else 'stick'}"
        name = name if name not in names else f"long {name}"  # every instruction names one object
        names.add(name)
        specs.append(
            {
                "id": f"standin_carrot_{i:02d}",
                "name": name,
                "shape": shape,
                "length": round(0.075 + 0.045 * ((i * 7) % 10) / 9, 4),
                "width": round(lo_w + (hi_w - lo_w) * ((i * 3) % 5) / 4, 4),
                "colour": colour,
            }
        )
    return specs


def plate_specs() -> list[dict]:
    """17 plates: id, instruction name, radius, colour. The task's success test takes the carrot as on the plate
    when their centres are closer than the plate's half size + 1 cm, and its start positions keep the centres
    more than 7 cm apart: radii of 5-5.5 cm keep every start from counting as a success."""
    colours = [
        "white",
        "blue",
        "green",
        "red",
        "yellow",
        "grey",
        "pink",
        "cyan",
        "black",
        "brown",
        "purple",
        "orange",
        "white",
        "blue",
        "green",
        "grey",
        "yellow",
    ]
    specs = []
    for i in range(NUM_PLATES):
        colour = colours[i]
        name = "plate" if i == 0 else f"{colour} {'plate' if i < 12 else 'dish'}"
        specs.append(
            {
                "id": f"standin_plate_{i:02d}",
                "name": name,
                "radius": round(0.05 + 0.005 * (i % 3) / 2, 4),
                "height": 0.014,
                "colour": colour,
            }
        )
    return specs


# --- mesh helpers ---------------------------------------------------------------------------------------------


def box_mesh(size: tuple[float, float, float]) -> tuple[np.ndarray, np.ndarray]:
    """Vertices [8, 3] and triangles [12, 3] of an axis-aligned box centred at the origin."""
    hx, hy, hz = (s / 2 for s in size)
    v = np.array([[x, y, z] for x in (-hx, hx) for y in (-hy, hy) for z in (-hz, hz)], dtype=np.float64)
    quads = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    f = [t for a, b, c, d in quads for t in ((a, b, c), (a, c, d))]
    return v, np.array(f, dtype=np.int64)


def prism_mesh(radius: float, height: float, sections: int) -> tuple[np.ndarray, np.ndarray]:
    """A closed prism along z (centred), with `sections` sides; outward-facing triangles."""
    ang = np.arange(sections) * 2 * math.pi / sections
    ring = np.stack([radius * np.cos(ang), radius * np.sin(ang)], axis=1)
    bottom = np.concatenate([ring, np.full((sections, 1), -height / 2)], axis=1)
    top = np.concatenate([ring, np.full((sections, 1), height / 2)], axis=1)
    v = np.concatenate([bottom, top, [[0, 0, -height / 2], [0, 0, height / 2]]])
    cb, ct = 2 * sections, 2 * sections + 1
    f = []
    for i in range(sections):
        j = (i + 1) % sections
        f += [
            (i, j, sections + j),
            (i, sections + j, sections + i),
            (cb, j, i),
            (ct, sections + i, sections + j),
        ]
    return v, np.array(f, dtype=np.int64)


def carrot_mesh(spec: dict) -> tuple[np.ndarray, np.ndarray]:
    """The object lying along x on a flat face, centred at the origin."""
    if spec["shape"] == "bar":
        return box_mesh((spec["length"], spec["width"], spec["width"] * 0.8))
    v, f = prism_mesh(spec["width"] / 2 / math.cos(math.pi / 6), spec["length"], 6)
    # prism axis z -> x; a flat side (the one facing -y after rotation) lies down
    rot = np.array([[0, 0, 1], [0, 1, 0], [-1, 0, 0]], dtype=np.float64)  # z -> x
    v = v @ rot.T
    rot_x = np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0]], dtype=np.float64)  # y -> z: a flat face down
    v = v @ rot_x.T
    v -= (v.max(0) + v.min(0)) / 2
    return v, f


def write_obj(
    path: Path, v: np.ndarray, f: np.ndarray, material: tuple[str, tuple[float, float, float]] | None
) -> None:
    """Wavefront OBJ (and its .mtl when `material` is given)."""
    lines = []
    if material is not None:
        name, rgb = material
        mtl = path.with_suffix(".mtl")
        mtl.write_text(
            f"newmtl {name}\nKa 0 0 0\nKd {rgb[0]:.4f} {rgb[1]:.4f} {rgb[2]:.4f}\nKs 0.1 0.1 0.1\nd 1\n"
        )
        lines += [f"mtllib {mtl.name}", f"usemtl {name}"]
    lines += [f"v {x:.6f} {y:.6f} {z:.6f}" for x, y, z in v]
    lines += [f"f {a + 1} {b + 1} {c + 1}" for a, b, c in f]
    path.write_text("\n".join(lines) + "\n")


def bbox(v: np.ndarray) -> dict:
    return {"min": [round(float(x), 6) for x in v.min(0)], "max": [round(float(x), 6) for x in v.max(0)]}


# --- writers ----------------------------------------------------------------------------------------------------


def write_objects(carrot_dir: Path) -> None:
    """more_carrot/ and more_plate/ with their model_db.json."""
    db: dict[str, dict] = {}
    for spec in carrot_specs():
        d = carrot_dir / "more_carrot" / spec["id"]
        d.mkdir(parents=True, exist_ok=True)
        v, f = carrot_mesh(spec)
        write_obj(d / "collision.obj", v, f, None)
        write_obj(d / "textured.obj", v, f, (spec["colour"], _COLOURS[spec["colour"]]))
        db[spec["id"]] = {"name": spec["name"], "bbox": bbox(v), "scale": [1.0], "density": 500}
    (carrot_dir / "more_carrot" / "model_db.json").write_text(json.dumps(db, indent=2))

    db = {}
    for spec in plate_specs():
        d = carrot_dir / "more_plate" / spec["id"]
        d.mkdir(parents=True, exist_ok=True)
        v, f = prism_mesh(spec["radius"], spec["height"], 32)
        write_obj(d / "collision.obj", v, f, None)
        write_obj(d / "textured.obj", v, f, (spec["colour"], _COLOURS[spec["colour"]]))
        db[spec["id"]] = {"name": spec["name"], "bbox": bbox(v), "scale": [1.0], "density": 800}
    (carrot_dir / "more_plate" / "model_db.json").write_text(json.dumps(db, indent=2))


def write_overlays(carrot_dir: Path) -> None:
    """more_table/: 21 plain backgrounds (a table-coloured lower part, a wall-coloured upper part) and textures."""
    from PIL import Image

    table = carrot_dir / "more_table"
    (table / "imgs").mkdir(parents=True, exist_ok=True)
    (table / "textures").mkdir(parents=True, exist_ok=True)
    h, w = OVERLAY_HW
    rows = np.linspace(0.0, 1.0, h)[:, None, None]
    db = {}
    for i in range(NUM_OVERLAYS):
        hue = i / NUM_OVERLAYS
        wall = np.array([200, 200, 205]) - 40 * np.array(
            [math.sin(2 * math.pi * hue), 0.5, math.cos(2 * math.pi * hue)]
        )
        wood = np.array([150 + 60 * hue, 110 + 30 * math.sin(3 * hue), 70 + 40 * (1 - hue)])
        horizon = 0.30 + 0.1 * ((i * 7) % 5) / 4
        img = np.where(rows < horizon, wall, wood * (0.85 + 0.15 * rows))
        img = np.broadcast_to(img, (h, w, 3)).clip(0, 255).astype(np.uint8)
        Image.fromarray(img).save(table / "imgs" / f"overlay_{i:02d}.png")
        yy, xx = np.mgrid[0:h, 0:w]
        check = (((yy // (16 + 2 * i)) + (xx // (16 + 2 * i))) % 2)[..., None]
        tex = (wood * (0.75 + 0.25 * check)).clip(0, 255).astype(np.uint8)
        Image.fromarray(tex).save(table / "textures" / f"texture_{i:02d}.png")
        db[f"overlay_{i:02d}.png"] = {"texture": f"texture_{i:02d}.png", "mix": round(0.2 + 0.6 * hue, 3)}
    (table / "model_db.json").write_text(json.dumps(db, indent=2))


def write_stage(data_dir: Path) -> None:
    """The table stage as a glTF binary, in the file frame that the task's stage pose maps onto the world."""
    import trimesh

    lo, hi = np.array(TABLE_WORLD_MIN), np.array(TABLE_WORLD_MAX)
    v, f = box_mesh(tuple(hi - lo))
    world = v + (hi + lo) / 2
    # world = R p + offset with R = +90 deg about x: (px, py, pz) -> (px, -pz, py); invert it
    p = world - np.array(STAGE_OFFSET)
    file_v = np.stack([p[:, 0], p[:, 2], -p[:, 1]], axis=1)
    mesh = trimesh.Trimesh(vertices=file_v, faces=f, process=False)
    mesh.fix_normals()
    mesh.visual.face_colors = [120, 95, 70, 255]
    out = data_dir / "tasks" / "bridge_v2_real2sim_dataset" / "stages"
    out.mkdir(parents=True, exist_ok=True)
    mesh.export(out / "bridge_table_1_v1.glb", file_type="glb")


def _inertia(mass: float, size: tuple[float, float, float]) -> tuple[float, float, float]:
    x, y, z = size
    return (mass * (y * y + z * z) / 12, mass * (x * x + z * z) / 12, mass * (x * x + y * y) / 12)


def wx250s_urdf() -> str:
    """The stand-in WidowX 250s URDF (names, axes, offsets and limits of the Interbotix description)."""
    out = ['<?xml version="1.0"?>', '<robot name="wx250s">']
    for name, (mass, boxes, rgba) in WX250S_LINKS.items():
        out.append(f'  <link name="{name}">')
        if boxes:
            size, centre = boxes[0]
            ixx, iyy, izz = _inertia(mass, size)
            cx, cy, cz = centre
        else:
            ixx = iyy = izz = 1e-6
            cx = cy = cz = 0.0
        out.append(
            f'    <inertial><origin xyz="{cx} {cy} {cz}" rpy="0 0 0"/><mass value="{mass}"/>'
            f'<inertia ixx="{ixx:.3e}" ixy="0" ixz="0" iyy="{iyy:.3e}" iyz="0" izz="{izz:.3e}"/></inertial>'
        )
        for k, (size, centre) in enumerate(boxes):
            geo = (
                f'<origin xyz="{centre[0]} {centre[1]} {centre[2]}" rpy="0 0 0"/>'
                f'<geometry><box size="{size[0]} {size[1]} {size[2]}"/></geometry>'
            )
            colour = " ".join(str(c) for c in rgba)
            out.append(
                f'    <visual name="{name}_visual_{k}">{geo}<material name="{name}_mat_{k}">'
                f'<color rgba="{colour}"/></material></visual>'
            )
            out.append(f'    <collision name="{name}_collision_{k}">{geo}</collision>')
        out.append("  </link>")
    for name, jtype, parent, child, xyz, axis, limits in WX250S_JOINTS:
        out.append(f'  <joint name="{name}" type="{jtype}">')
        out.append(f'    <parent link="{parent}"/><child link="{child}"/>')
        out.append(f'    <origin xyz="{xyz[0]} {xyz[1]} {xyz[2]}" rpy="0 0 0"/>')
        if axis is not None:
            out.append(f'    <axis xyz="{axis[0]} {axis[1]} {axis[2]}"/>')
            effort, velocity = (10.0, 3.14) if jtype == "revolute" else (20.0, 1.0)
            out.append(
                f'    <limit lower="{limits[0]}" upper="{limits[1]}" effort="{effort}" velocity="{velocity}"/>'
            )
        out.append("  </joint>")
    out.append("</robot>")
    return "\n".join(out) + "\n"


def write_robot(data_dir: Path) -> None:
    robot = data_dir / "robots" / "widowx"
    robot.mkdir(parents=True, exist_ok=True)
    (robot / "wx250s.urdf").write_text(wx250s_urdf())


def write_pack(out: Path, force: bool = False) -> Path:
    """Write the whole pack under `out` (refuses a non-empty folder that is not a stand-in pack)."""
    marker = out / "standin.json"
    if out.exists() and any(out.iterdir()):
        if not marker.exists():
            raise SystemExit(
                f"{out} is not empty and holds no stand-in pack (standin.json); pick an empty folder"
            )
        if not force:
            info = json.loads(marker.read_text())
            if info.get("version") == PACK_VERSION:
                print(f"[maniskill-standin] {out} already holds stand-in pack version {PACK_VERSION}")
                return out
        for sub in ("data", "carrot"):
            shutil.rmtree(out / sub, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    write_stage(out / "data")
    write_robot(out / "data")
    write_objects(out / "carrot")
    write_overlays(out / "carrot")
    marker.write_text(
        json.dumps(
            {
                "kind": "stand-in assets for the PutOnPlateInScene25 ManiSkill tasks (simple shapes, plain overlays)",
                "version": PACK_VERSION,
                "writer": "scripts/maniskill_standin_assets.py",
                "use": "export MS_ASSET_DIR=<this folder> MANISKILL_ASSET_DIR=<this folder>",
            },
            indent=2,
        )
    )
    print(f"[maniskill-standin] wrote {out}: export MS_ASSET_DIR={out} MANISKILL_ASSET_DIR={out}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", required=True, type=Path, help="folder to write (empty, or an older stand-in pack)"
    )
    parser.add_argument("--force", action="store_true", help="rewrite a stand-in pack of the same version")
    args = parser.parse_args()
    write_pack(args.out.resolve(), force=args.force)


if __name__ == "__main__":
    main()
