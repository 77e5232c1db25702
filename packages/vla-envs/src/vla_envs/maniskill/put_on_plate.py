"""The PutOnPlateInScene25 task family of the reference framework, run on its own task code.

The tasks are defined by the reference framework's package (`rlinf==0.3.0`, `rlinf/envs/maniskill/tasks/`),
registered with ManiSkill when `rlinf.envs.maniskill` is imported. They need assets that normally come from a
model hub; both the real ones and the stand-in pack of `scripts/maniskill_standin_assets.py` have this layout:

    $MS_ASSET_DIR/data/tasks/bridge_v2_real2sim_dataset/stages/bridge_table_1_v1.glb   table stage
    $MS_ASSET_DIR/data/robots/widowx/wx250s.urdf                                      WidowX 250s
    $MANISKILL_ASSET_DIR/carrot/more_carrot/model_db.json + <id>/collision.obj, textured.{obj,dae,glb}
    $MANISKILL_ASSET_DIR/carrot/more_plate/model_db.json  + <id>/...
    $MANISKILL_ASSET_DIR/carrot/more_table/model_db.json, imgs/<key>, textures/<texture>   overlays

ManiSkill and the task code read these two variables when they are first imported, so the process that builds
the env sets them first (`prepare_process`), from `extra["asset_dir"]` or the caller's environment.

Semantics follow the reference's env wrapper (`rlinf/envs/maniskill/maniskill_env.py`):
    * observation: the task's `3rd_view_camera` (640 x 480) after the task's own overlay compositing
      (obs_mode "rgb+segmentation"), resized to `image_size`; states = the robot's joint positions [8];
      instruction = the task's `get_language_instruction()`, read again after every reset;
    * reward: "dense" = the wrapper's default (0.1 x source object grasped + 0.1 x grasped for 5 consecutive
      steps + 1.0 x success while grasped, the grasp flags as the task reports them: held once in the episode),
      "sparse" = the wrapper's "only_success" (1.0 x success); with `use_rel_reward` the change since the
      previous step (0 before the first step), as the guides' configs set it;
    * success = the task's `evaluate()["success"]`; termination = success (the task defines no failure);
    * action: 7-D end-effector target deltas (metres, radians) and the gripper, which with `gripper_action`
      "threshold" is mapped as the reference's widowx_bridge policy setup does (a value in [0, 1], above 0.5
      opens: +1, else closes: -1), so that checkpoints de-normalised with the bridge statistics act as there.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

TASK_CODE_HELP = (
    "the PutOnPlateInScene25 tasks are defined by the reference framework's package: run "
    "`pip install --no-deps rlinf==0.3.0` (its declared dependencies are not needed; it needs omegaconf)"
)
#: The folder of the stand-in pack that `STANDIN_HELP`'s command writes.
STANDIN_DIR = "~/.maniskill-standin"
STANDIN_HELP = (
    f"run `python scripts/maniskill_standin_assets.py --out {STANDIN_DIR} && export "
    f"MS_ASSET_DIR={STANDIN_DIR} MANISKILL_ASSET_DIR={STANDIN_DIR}` in the repository to use a stand-in pack, or "
    "point both variables (or extra.asset_dir) at the real assets (ManiSkill's bridge_v2_real2sim + widowx250s "
    "under $MS_ASSET_DIR/data, RLinf's maniskill_assets dataset's carrot/ under $MANISKILL_ASSET_DIR)"
)

TRAIN_TASKS = (
    "PutOnPlateInScene25Main-v3",
    "PutOnPlateInScene25MainCarrot-v3",
    "PutOnPlateInScene25MainImage-v3",
)
# The out-of-distribution evaluation sets of the guides (the rl4vla test set), by column of the guides' table.
OOD_SPLITS: dict[str, tuple[str, ...]] = {
    "vision": (
        "PutOnPlateInScene25VisionImage-v1",
        "PutOnPlateInScene25VisionTexture03-v1",
        "PutOnPlateInScene25VisionTexture05-v1",
        "PutOnPlateInScene25VisionWhole03-v1",
        "PutOnPlateInScene25VisionWhole05-v1",
    ),
    "semantic": (
        "PutOnPlateInScene25Carrot-v1",
        "PutOnPlateInScene25Plate-v1",
        "PutOnPlateInScene25Instruct-v1",
        "PutOnPlateInScene25MultiCarrot-v1",
        "PutOnPlateInScene25MultiPlate-v1",
    ),
    "execution": (
        "PutOnPlateInScene25Position-v1",
        "PutOnPlateInScene25EEPose-v1",
        "PutOnPlateInScene25PositionChangeTo-v1",
    ),
}
OTHER_TASKS = ("PutOnPlateInScene25Single-v1",)  # one carrot, one plate, one overlay
SPLIT_OF: dict[str, str] = {
    **{t: "train" for t in TRAIN_TASKS},
    **{t: split for split, tasks in OOD_SPLITS.items() for t in tasks},
    **{t: "single" for t in OTHER_TASKS},
}
PUT_ON_PLATE_TASKS = tuple(SPLIT_OF)
# Column titles of the guides' ManiSkill3 table, in its order (the evaluation tables' groups).
SPLIT_LABELS = {
    "train": "Training setting (IND)",
    "vision": "Vision (OOD)",
    "semantic": "Semantic (OOD)",
    "execution": "Execution (OOD)",
    "single": "Single scene",
}

CAMERA = "3rd_view_camera"
RENDER_HW = (480, 640)  # the task asserts this sensor size; `image_size` is a resize of it
STATE_DIM = 8  # WidowX joint positions: 6 arm joints + 2 fingers
# The task's default controller, arm_pd_ee_target_delta_pose_align2_gripper_pd_joint_pos: end-effector target
# deltas in metres and radians (not normalised; the controller's own bounds) and a normalised gripper
# (-1 closed ... +1 open).
ACTION_LOW = np.array([-1.0, -1.0, -1.0, -math.pi / 2, -math.pi / 2, -math.pi / 2, -1.0], dtype=np.float32)
ACTION_HIGH = -ACTION_LOW
OBJ_SETS = ("train", "test", "all")
GRIPPER_ACTIONS = ("threshold", "signed")
# Object counts the task code asserts, and the variants that need every plate.
NUM_CARROTS, NUM_PLATES, NUM_OVERLAYS = 25, 17, 21
ALL_PLATES_TASKS = ("PutOnPlateInScene25Plate-v1", "PutOnPlateInScene25MultiPlate-v1")
FIRST_CARROT_TASKS = ("PutOnPlateInScene25MainImage-v3", "PutOnPlateInScene25Single-v1")
_VISUAL_FILES = ("textured.obj", "textured.dae", "textured.glb")


class PutOnPlateAssetsError(FileNotFoundError):
    """Assets of the PutOnPlateInScene25 tasks are missing or incomplete (one line: what, where, how to get it)."""


def is_put_on_plate(task: str) -> bool:
    """True for the PutOnPlateInScene25 ids this adapter drives."""
    return task in SPLIT_OF


def _rlinf_default_asset_dir() -> Path | None:
    spec = importlib.util.find_spec("rlinf")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "envs" / "maniskill" / "assets"


def asset_roots(asset_dir: str | None = None) -> tuple[Path, Path]:
    """(MS_ASSET_DIR, MANISKILL_ASSET_DIR) the tasks will read: `asset_dir` for both when given, else the
    environment's variables, else ManiSkill's default (~/.maniskill) and the task code's (its package's assets/)."""
    if asset_dir:
        root = Path(asset_dir).expanduser().resolve()
        return root, root
    ms = Path(os.environ.get("MS_ASSET_DIR", Path.home() / ".maniskill")).expanduser()
    env_carrot = os.environ.get("MANISKILL_ASSET_DIR")
    carrot = Path(env_carrot).expanduser() if env_carrot else (_rlinf_default_asset_dir() or Path("assets"))
    return ms, carrot


def missing_assets(task: str, ms_root: Path, carrot_root: Path) -> list[str]:
    """What `task` would open and cannot find (paths, or a count the task code asserts), in reading order."""
    problems: list[str] = []
    data = ms_root / "data"
    for path in (
        data / "tasks" / "bridge_v2_real2sim_dataset" / "stages" / "bridge_table_1_v1.glb",
        data / "robots" / "widowx" / "wx250s.urdf",
    ):
        if not path.is_file():
            problems.append(f"{path} (MS_ASSET_DIR={ms_root})")
    carrot = carrot_root / "carrot"
    # (exact count the task asserts, or None: it uses the first entry)
    need = {
        "more_carrot": None if task in FIRST_CARROT_TASKS else NUM_CARROTS,
        "more_plate": NUM_PLATES if task in ALL_PLATES_TASKS else None,
    }
    for folder, count in need.items():
        db_path = carrot / folder / "model_db.json"
        if not db_path.is_file():
            problems.append(f"{db_path} (MANISKILL_ASSET_DIR={carrot_root})")
            continue
        db = json.loads(db_path.read_text())
        if (count is not None and len(db) != count) or not db:
            problems.append(f"{db_path} lists {len(db)} objects, the task needs {count or 'at least 1'}")
        for name, entry in db.items():
            obj = carrot / folder / name
            if not (obj / "collision.obj").is_file() or not any((obj / v).is_file() for v in _VISUAL_FILES):
                problems.append(f"{obj}/collision.obj and textured.(obj|dae|glb)")
            elif "bbox" not in entry or "name" not in entry:
                problems.append(f"{db_path} entry {name!r} needs 'bbox' and 'name'")
    table_db = carrot / "more_table" / "model_db.json"
    if not table_db.is_file():
        problems.append(f"{table_db} (MANISKILL_ASSET_DIR={carrot_root})")
    else:
        db = json.loads(table_db.read_text())
        if len(db) != NUM_OVERLAYS:
            problems.append(f"{table_db} lists {len(db)} overlays, the task needs {NUM_OVERLAYS}")
        for key, entry in db.items():
            for path in (
                carrot / "more_table" / "imgs" / key,
                carrot / "more_table" / "textures" / entry.get("texture", "?"),
            ):
                if not path.is_file():
                    problems.append(str(path))
    return problems


def check_assets(task: str, asset_dir: str | None = None) -> None:
    """Raise `PutOnPlateAssetsError` (one line) when the assets of `task` are missing or incomplete."""
    ms_root, carrot_root = asset_roots(asset_dir)
    problems = missing_assets(task, ms_root, carrot_root)
    if problems:
        more = f" and {len(problems) - 3} more" if len(problems) > 3 else ""
        raise PutOnPlateAssetsError(
            f"ManiSkill task {task!r} cannot find its assets: {'; '.join(problems[:3])}{more}: {STANDIN_HELP}"
        )


def check_task_code_installed() -> None:
    """Raise `SimulatorNotInstalled` when the task code's package (`rlinf`) is not installed (not imported)."""
    from vla_envs.setup_errors import SimulatorNotInstalled, missing_modules

    if missing_modules(["rlinf"]):
        raise SimulatorNotInstalled(f"the Python package rlinf is not installed: {TASK_CODE_HELP}")


def import_task_code() -> Any:
    """Import the reference's ManiSkill tasks (registers the family); returns the task module.

    Raises:
        ImportError: the task code is not installed (the message says what to install).
    """
    try:
        import rlinf.envs.maniskill  # noqa: F401  (imports every task module, which registers the ids)
        from rlinf.envs.maniskill.tasks import put_on_in_scene_multi
    except ImportError as exc:
        from vla_envs.setup_errors import SimulatorNotInstalled

        raise SimulatorNotInstalled(
            f"cannot import the reference's ManiSkill task code ({exc}); {TASK_CODE_HELP}"
        ) from exc
    _give_main_image_its_obj_set()
    return put_on_in_scene_multi


def _give_main_image_its_obj_set() -> None:
    """`PutOnPlateInScene25MainImage-v3` in rlinf 0.3.0 reads `self.E` where its siblings read `self.obj_set`
    (first line of its `basic_obj_infos`); no class defines `E`, so the task fails while it is built. `E` is
    given to that class as a read-only alias of `obj_set`; nothing else of the task changes."""
    from rlinf.envs.maniskill.tasks.variants import put_on_plate_25_image

    cls = put_on_plate_25_image.PutOnPlateInScene25MainImageV3
    if not hasattr(cls, "E"):
        cls.E = property(lambda self: self.obj_set)


def prepare_process(ms_root: Path, carrot_root: Path) -> None:
    """Point ManiSkill and the task code at the assets in this process, before either is imported.

    Both read their asset variables once, at import; a process that already imported them with other folders
    cannot be redirected, which is an error here (build the env in a worker: `envs_per_worker >= 1`).
    """
    ms_root, carrot_root = Path(ms_root), Path(carrot_root)
    if "mani_skill" not in sys.modules:
        os.environ["MS_ASSET_DIR"] = str(ms_root)
    if "rlinf.envs.maniskill.tasks.put_on_in_scene_multi" not in sys.modules:
        os.environ["MANISKILL_ASSET_DIR"] = str(carrot_root)
    os.environ.setdefault("MS_SKIP_ASSET_DOWNLOAD_PROMPT", "1")
    import mani_skill

    module = import_task_code()
    wanted = {
        "MS_ASSET_DIR": (Path(mani_skill.ASSET_DIR), ms_root / "data"),
        "MANISKILL_ASSET_DIR": (Path(module.CARROT_DATASET_DIR), carrot_root / "carrot"),
    }
    for var, (have, want) in wanted.items():
        if have.resolve() != want.resolve():
            raise RuntimeError(
                f"this process imported ManiSkill's tasks reading {have}, but the env needs {want} ({var}): the "
                "asset folders are read once per process; build the env in a worker (envs_per_worker >= 1) or set "
                f"{var} before anything imports mani_skill"
            )


def episode_ids(trials: np.ndarray, num_trials_per_task: int, total_num_trials: int) -> np.ndarray:
    """The task's `episode_id` of each trial (int64): the identity when the trials cover every episode id,
    else a fixed draw per trial over all of them (numpy PCG64 seeded with the trial), so that a few trials
    still vary object, overlay, position and rotation like the reference's uniform draws."""
    trials = np.asarray(trials, dtype=np.int64)
    if num_trials_per_task >= total_num_trials:
        return trials % total_num_trials
    return np.array(
        [np.random.default_rng([int(t), 25]).integers(0, total_num_trials) for t in trials.reshape(-1)],
        dtype=np.int64,
    ).reshape(trials.shape)


def frames(raw_obs: Any, image_hw: tuple[int, int]) -> Any:
    """uint8 torch [n, H, W, 3] on the render device: the overlaid 3rd-view frames, resized when needed
    (bilinear with antialiasing, rounded; the same on both backends)."""
    import torch

    rgb = raw_obs["sensor_data"][CAMERA]["rgb"].to(torch.uint8)
    h, w = image_hw
    if tuple(rgb.shape[1:3]) == (h, w):
        return rgb
    x = rgb.permute(0, 3, 1, 2).float()
    x = torch.nn.functional.interpolate(x, size=(h, w), mode="bilinear", antialias=True, align_corners=False)
    return x.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()


def step_reward(info: dict[str, Any], reward_mode: str) -> Any:
    """float32 torch [n] on the info's device: the reference wrapper's per-step reward before `use_rel_reward`
    ("dense": its default grasp-shaped reward; "sparse": its "only_success")."""
    success = info["success"].bool().reshape(-1)
    if reward_mode == "sparse":
        return success.float()
    grasped = info["is_src_obj_grasped"].bool().reshape(-1)
    held = info["consecutive_grasp"].bool().reshape(-1)
    return 0.1 * grasped.float() + 0.1 * held.float() + 1.0 * (success & grasped).float()


def gripper_command(value: float, gripper_action: str) -> float:
    """The controller's gripper input (-1 closed ... +1 open) for the policy's 7th action value."""
    if gripper_action == "threshold":
        return 1.0 if value > 0.5 else -1.0
    return float(value)
