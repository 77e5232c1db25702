"""The reference's PutOnPlateInScene25 tasks (their own code, package `rlinf`) through `make_env`, on the CPU.

The assets are the stand-in pack that `scripts/maniskill_standin_assets.py` writes (module fixture). One env of
`PutOnPlateInScene25Main-v3` is built for the module (2 rows in one worker, ~30-70 s on llvmpipe); the success
check and the evaluation variants run in a child process that reaches into the simulator (the task code and
ManiSkill read their asset folders once per process, so a test process that already imported them for other
tests could not build these envs in-process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mani_skill", reason="mani-skill not installed (pip install 'vla-envs[maniskill]')")

from vla_envs import EnvConfig, make_env
from vla_envs.maniskill import ManiSkillAssetsMissingError, maniskill_unavailable_reason
from vla_envs.maniskill.put_on_plate import (
    OOD_SPLITS,
    PUT_ON_PLATE_TASKS,
    STATE_DIM,
    episode_ids,
    step_reward,
)

REPO = Path(__file__).resolve().parents[3]
STANDIN_SCRIPT = REPO / "scripts" / "maniskill_standin_assets.py"
MAIN = "PutOnPlateInScene25Main-v3"
INITIAL_QPOS = [-0.01840777, 0.0398835, 0.22242722, -0.00460194, 1.36524296, 0.00153398, 0.037, 0.037]


def _cfg(pack: Path, **changes) -> EnvConfig:
    base = EnvConfig(
        env_type="maniskill",
        task=MAIN,
        num_envs=2,
        envs_per_worker=2,
        image_size=224,
        max_episode_steps=3,
        num_trials_per_task=1000,
        reward_mode="sparse",
        seed=0,
        worker_timeout_s=600,
        extra={"asset_dir": str(pack)},
    )
    return base.replace(**changes)


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("maniskill_standin")
    subprocess.run([sys.executable, str(STANDIN_SCRIPT), "--out", str(out)], check=True, timeout=120)
    return out


@pytest.fixture(scope="module")
def task_code() -> None:
    pytest.importorskip("rlinf", reason="the task code is not installed (pip install --no-deps rlinf==0.3.0)")
    reason = maniskill_unavailable_reason()
    if reason is not None:
        pytest.skip(f"ManiSkill cannot create envs here: {reason}")


@pytest.fixture(scope="module")
def env(pack: Path, task_code: None):
    env = make_env(_cfg(pack))
    yield env
    env.close()


def _names(pack: Path, folder: str) -> list[str]:
    return [e["name"] for e in json.loads((pack / "carrot" / folder / "model_db.json").read_text()).values()]


def _run_probe(pack: Path, code: str, timeout: int) -> list[dict]:
    """Run `code` in a fresh interpreter; it prints one JSON object per line prefixed with 'PROBE '."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), str(pack)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line[6:]) for line in out.stdout.splitlines() if line.startswith("PROBE ")]


# ------------------------------------------------------------------------------------------- no simulator
def test_reward_follows_the_reference_wrapper() -> None:
    import torch

    info = {
        "success": torch.tensor([False, True, True, False]),
        "is_src_obj_grasped": torch.tensor([True, True, False, False]),
        "consecutive_grasp": torch.tensor([True, False, False, False]),
    }
    np.testing.assert_allclose(step_reward(info, "dense"), [0.2, 1.1, 0.0, 0.0], atol=1e-6)
    np.testing.assert_array_equal(step_reward(info, "sparse"), [0.0, 1.0, 1.0, 0.0])


def test_trials_map_to_fixed_spread_episode_ids() -> None:
    ids = episode_ids(np.arange(200), 200, 802816)
    np.testing.assert_array_equal(ids, episode_ids(np.arange(200), 200, 802816))  # the same in every process
    assert len(set(ids.tolist())) == 200 and ids.min() >= 0 and ids.max() < 802816
    # Main-v3 train ids: carrot = id // 50176 (16 carrots); a few trials already vary the carrot
    assert len(set((ids // 50176).tolist())) == 16
    np.testing.assert_array_equal(episode_ids(np.arange(5), 3136, 3136), np.arange(5))


def test_evaluation_tables_have_the_guides_split_columns() -> None:
    from vla_envs import evaluation_table, format_evaluation_tables, task_grouping

    tasks = [t for split in OOD_SPLITS.values() for t in split]
    grouping = task_grouping("maniskill", tasks)
    assert grouping.order == ["vision", "semantic", "execution"]
    assert [grouping.labels[g] for g in grouping.order] == [
        "Vision (OOD)",
        "Semantic (OOD)",
        "Execution (OOD)",
    ]
    # 2 episodes per task: Vision tasks succeed once, Semantic never, Execution always
    names = [t for t in tasks for _ in range(2)]
    success = [
        {"vision": [1, 0], "semantic": [0, 0], "execution": [1, 1]}[grouping.groups[t]][k]
        for t in tasks
        for k in (0, 1)
    ]
    table = evaluation_table(names, success, grouping)
    assert [table["groups"][g]["success_once"] for g in grouping.order] == [0.5, 0.0, 1.0]
    assert table["avg"] == pytest.approx(0.5) and table["all_tasks"] == pytest.approx((5 * 0.5 + 3) / 13)
    assert "Execution (OOD)" in format_evaluation_tables({"eval": table})
    assert task_grouping("maniskill", ["PickCube-v1"]).groups == {}


@pytest.mark.parametrize(
    ("extra", "changes", "match"),
    [
        ({"obj_set": "val"}, {}, r"extra\['obj_set'\]='val'.*'train', 'test', 'all'"),
        ({"control_mode": "pd_ee_delta_pose"}, {}, r"extra\['control_mode'\].*own WidowX controller"),
        ({"use_rel_reward": "yes"}, {}, r"extra\['use_rel_reward'\]='yes'"),
        ({}, {"camera": "base_camera"}, r"camera='base_camera'.*3rd_view_camera"),
        ({}, {"wrist_camera": "hand_camera"}, r"wrist_camera='hand_camera'"),
        ({}, {"render": False}, r"render=False"),
        ({"reward_mode": "normalized_dense"}, {}, r"extra\['reward_mode'\]='normalized_dense'"),
    ],
)
def test_bad_settings_name_the_key(extra: dict, changes: dict, match: str) -> None:
    from vla_envs import check_env_config

    cfg = EnvConfig(env_type="maniskill", task=MAIN, extra=extra).replace(**changes)
    with pytest.raises(ValueError, match=match):
        check_env_config(cfg)


def test_put_on_plate_keys_are_refused_for_other_tasks() -> None:
    from vla_envs import check_env_config

    with pytest.raises(ValueError, match=r"extra\['obj_set'\].*only the PutOnPlateInScene25 tasks"):
        check_env_config(EnvConfig(env_type="maniskill", task="PickCube-v1", extra={"obj_set": "test"}))


@pytest.mark.timeout(120)
def test_missing_or_partial_assets_say_where_to_put_what(pack: Path, task_code: None, tmp_path) -> None:
    with pytest.raises(ManiSkillAssetsMissingError) as info:
        make_env(_cfg(pack, extra={"asset_dir": str(tmp_path / "nothing")}))
    msg = str(info.value)
    assert "\n" not in msg and "bridge_table_1_v1.glb" in msg and "wx250s.urdf" in msg
    assert "scripts/maniskill_standin_assets.py" in msg and "MANISKILL_ASSET_DIR" in msg
    # a partial pack: one object without its collision mesh, one overlay image gone
    partial = tmp_path / "partial"
    subprocess.run([sys.executable, str(STANDIN_SCRIPT), "--out", str(partial)], check=True, timeout=120)
    (partial / "carrot" / "more_carrot" / "standin_carrot_03" / "collision.obj").unlink()
    (partial / "carrot" / "more_table" / "imgs" / "overlay_07.png").unlink()
    with pytest.raises(ManiSkillAssetsMissingError) as info:
        make_env(_cfg(pack, extra={"asset_dir": str(partial)}))
    msg = str(info.value)
    assert "standin_carrot_03/collision.obj" in msg and "overlay_07.png" in msg and "\n" not in msg


def test_unknown_task_id_lists_the_family(task_code: None) -> None:
    with pytest.raises(ValueError, match=r"'PutOnPlateInScene25Mian-v3' is not a registered.*Main-v3"):
        make_env(EnvConfig(env_type="maniskill", task="PutOnPlateInScene25Mian-v3"))


def test_missing_task_code_says_what_to_install(pack: Path) -> None:
    """With the `rlinf` package hidden from imports, building a PutOnPlate env ends in one clear line."""
    code = f"""
    import sys, importlib.abc
    class Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "rlinf" or name.startswith("rlinf."):
                raise ModuleNotFoundError(f"No module named {{name!r}}")
    sys.meta_path.insert(0, Hide())
    from vla_envs import EnvConfig, make_env
    try:
        make_env(EnvConfig(env_type="maniskill", task="{MAIN}", extra={{"asset_dir": sys.argv[1]}}))
    except ImportError as exc:
        print("RAISED", str(exc))
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), str(pack)], capture_output=True, text=True, timeout=120
    )
    assert "RAISED" in out.stdout, out.stderr[-2000:]
    assert "pip install --no-deps rlinf==0.3.0" in out.stdout


# ------------------------------------------------------------------------------------------- one env, 2 rows
@pytest.mark.slow
def test_contract_types_and_equal_ids_give_equal_starts(env, pack: Path) -> None:
    obs = env.reset(reset_state_ids=[5, 5])
    assert env.action_dim == 7 and env.autoreset_mode == "same_step"
    np.testing.assert_allclose(env.action_high, [1, 1, 1, np.pi / 2, np.pi / 2, np.pi / 2, 1], rtol=1e-6)
    assert obs["images"].shape == (2, 224, 224, 3) and obs["images"].dtype == np.uint8
    assert obs["wrist_images"] is None
    assert obs["states"].shape == (2, STATE_DIM) and obs["states"].dtype == np.float32
    np.testing.assert_allclose(obs["states"][0], INITIAL_QPOS, atol=1e-4)  # the task's measured start pose
    np.testing.assert_array_equal(obs["images"][0], obs["images"][1])
    first_image, first_text = obs["images"][0].copy(), obs["task_descriptions"][0]
    env.reset(reset_state_ids=[700, 5])
    obs = env.reset(reset_state_ids=[5, 700])  # the same id later, on the other row
    np.testing.assert_array_equal(obs["images"][0], first_image)
    assert obs["task_descriptions"][0] == first_text
    assert not np.array_equal(obs["images"][1], first_image)  # another episode id: another scene


@pytest.mark.slow
def test_frames_are_the_overlaid_third_view_and_instructions_come_from_the_task(env, pack: Path) -> None:
    from PIL import Image

    obs = env.reset(reset_state_ids=[0, 321])
    carrots, plates = _names(pack, "more_carrot"), _names(pack, "more_plate")
    allowed = {f"put {c} on {p}" for c in carrots for p in plates}
    assert all(text in allowed for text in obs["task_descriptions"]), obs["task_descriptions"]
    # the background is the task's overlay image (its flat wall colour at the top), resized like the frame
    walls = [
        np.asarray(Image.open(p).convert("RGB"))[0, 0].astype(int)
        for p in sorted((pack / "carrot" / "more_table" / "imgs").glob("*.png"))
    ]
    for image in obs["images"]:
        corner = image[2, 2].astype(int)
        assert min(np.abs(corner - w).max() for w in walls) <= 2, corner
        # ... with the robot and the objects drawn over it: many pixels differ from the flat overlay colours
        assert (np.abs(image.astype(int) - image[2, 2].astype(int)).max(-1) > 10).mean() > 0.3


@pytest.mark.slow
def test_truncation_with_same_step_autoreset(env) -> None:
    obs0 = env.reset(reset_state_ids=[11, 12])
    act = np.zeros((2, 2, 7), np.float32)
    act[..., 0] = 0.01  # a small move in x; gripper half open
    res = env.chunk_step(act)
    assert not res.final_mask.any() and not res.truncated.any() and not res.terminated.any()
    assert np.abs(res.obs["states"] - obs0["states"]).max() > 1e-3  # the arm moved
    res = env.chunk_step(act)  # the 3rd decision ends the episode (max_episode_steps=3)
    assert res.final_mask.all() and res.truncated[:, 0].all() and not res.truncated[:, 1].any()
    assert not res.terminated.any() and (res.rewards[:, 1] == 0).all()
    np.testing.assert_array_equal(res.episode_metrics["episode_len"], [3, 3])
    np.testing.assert_array_equal(res.episode_metrics["success_once"], [0, 0])
    # same step: obs is already the next episode's start, final_obs the ended one's last frame
    np.testing.assert_allclose(res.obs["states"][:, :6], np.tile(INITIAL_QPOS[:6], (2, 1)), atol=1e-4)
    assert np.abs(res.final_obs["states"] - res.obs["states"]).max() > 1e-3


# ------------------------------------------------------------------------------------------- child processes
_SUCCESS_PROBE = """
import json, sys
import numpy as np
import torch
from vla_envs import EnvConfig
from vla_envs.maniskill.cpu_sim import build_maniskill_sims
from vla_envs.runner import EnvRunner
from vla_envs.sim import SimSpec

cfg = EnvConfig(env_type="maniskill", task="PutOnPlateInScene25Main-v3", num_envs=1, image_size=64,
                max_episode_steps=20, num_trials_per_task=1000, reward_mode="sparse",
                extra={"asset_dir": sys.argv[1]})
sims = build_maniskill_sims(cfg, SimSpec("", 7, np.zeros(7), np.zeros(7), [cfg.task]), [0])
runner = EnvRunner(cfg, sims)
base = sims[0].base
hold = np.zeros((1, 3, 7), np.float32)
hold[..., 6] = 1.0  # gripper open, arm still

def put_carrot(dx):
    from mani_skill.utils.structs.pose import Pose
    carrot, plate = base.objs[base.source_obj_name], base.objs[base.target_obj_name]
    p = plate.pose.p.clone()
    p[:, 0] += dx
    p[:, 2] += (base.plate_bbox_world[0, 2] + base.carrot_bbox_world[0, 2]) / 2 + 0.01
    carrot.set_pose(Pose.create_from_pq(p=p, q=carrot.pose.q))

for label, dx in (("beside", 0.25), ("on", 0.0)):
    runner.reset([42])
    put_carrot(dx)
    out = runner.run_chunk(hold, [43])
    print("PROBE " + json.dumps({
        "label": label,
        "rewards": out["rewards"][0].tolist(),
        "terminated": out["terminated"][0].tolist(),
        "success": out["success"][0].tolist(),
        "ended": bool(out["ended"][0]),
        "task_success_now": bool(base.evaluate()["success"][0]),
        "reset_state_after": out["obs"]["states"][0].tolist(),
    }))
"""


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_success_is_the_task_own_check_and_terminates(pack: Path, task_code: None) -> None:
    """A carrot set on the plate is a success by the task's own `evaluate()` (bbox and contact force): the
    episode terminates with the sparse relative reward +1 and the row restarts; one set beside it is not."""
    beside, on = _run_probe(pack, _SUCCESS_PROBE, timeout=380)
    assert beside["label"] == "beside" and not any(beside["success"]) and not any(beside["terminated"])
    assert beside["rewards"] == [0.0, 0.0, 0.0] and not beside["ended"]
    assert on["success"][0] and on["terminated"] == [True, False, False] and on["ended"]
    assert on["rewards"] == [1.0, 0.0, 0.0]
    np.testing.assert_allclose(on["reset_state_after"][:6], INITIAL_QPOS[:6], atol=1e-4)  # autoreset


_VARIANTS_PROBE = """
import json, sys
import numpy as np
from vla_envs import EnvConfig
from vla_envs.maniskill.cpu_sim import build_maniskill_sims
from vla_envs.sim import SimSpec

for task in sys.argv[2].split(","):
    obj_set = "train" if task.endswith("-v3") else "test"
    cfg = EnvConfig(env_type="maniskill", task=task, num_envs=1, image_size=64, max_episode_steps=5,
                    num_trials_per_task=50, reward_mode="dense", extra={"asset_dir": sys.argv[1], "obj_set": obj_set})
    (sim,) = build_maniskill_sims(cfg, SimSpec("", 7, np.zeros(7), np.zeros(7), [task]), [0])
    obs = sim.reset(3)
    act = np.zeros(7, np.float32)
    act[2] = 0.02
    obs2, reward, success, _ = sim.step(act)
    print("PROBE " + json.dumps({"task": task, "shape": list(obs["images"].shape), "text": obs["task_descriptions"],
                                 "moved": float(np.abs(obs2["states"] - obs["states"]).max()),
                                 "reward": reward, "success": success, "trials": sim.total_num_trials}))
    sim.close()
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_training_and_evaluation_variant_builds_and_steps(pack: Path, task_code: None) -> None:
    tasks = [t for t in PUT_ON_PLATE_TASKS if t != MAIN]
    code = _VARIANTS_PROBE.replace("sys.argv[2]", repr(",".join(tasks)))
    results = {r["task"]: r for r in _run_probe(pack, code, timeout=580)}
    assert set(results) == set(tasks)
    for task, r in results.items():
        assert r["shape"] == [64, 64, 3] and r["text"] and r["moved"] > 1e-4, (task, r)
        # the dense reward needs a grasp; some variants may start with the object already on the plate
        assert r["reward"] == 0.0 and isinstance(r["success"], bool), (task, r)
    # semantic variants change the words; the instruction variant rewrites the sentence
    assert not results["PutOnPlateInScene25Instruct-v1"]["text"].startswith("put ")
    assert all(t in results for split in OOD_SPLITS.values() for t in split)


_BATCHED_PROBE = """
import json, sys
import numpy as np
from vla_envs import EnvConfig
from vla_envs.maniskill import put_on_plate
from vla_envs.maniskill.cpu_sim import build_maniskill_sims
from vla_envs.maniskill.gpu_env import ManiSkillGPUEnv
from vla_envs.maniskill.options import resolve_options
from vla_envs.sim import SimSpec

cfg = EnvConfig(env_type="maniskill", task="PutOnPlateInScene25Main-v3", num_envs=1, image_size=96,
                max_episode_steps=2, num_trials_per_task=1000, reward_mode="sparse",
                extra={"asset_dir": sys.argv[1], "sim_backend": "cpu"})
put_on_plate.prepare_process(*put_on_plate.asset_roots(sys.argv[1]))
batched = ManiSkillGPUEnv(cfg, resolve_options(cfg))  # the GPU backend's logic on a one-env CPU simulation
(sim,) = build_maniskill_sims(cfg, SimSpec("", 7, np.zeros(7), np.zeros(7), [cfg.task]), [0])
a = batched.reset(reset_state_ids=np.array([77]))
b = sim.reset(77)
act = np.zeros((1, 2, 7), np.float32)
act[..., 2] = 0.02
act[..., 6] = 0.9
res = batched.chunk_step(act)
s1, _, _, _ = sim.step(act[0, 0])
s2, _, _, _ = sim.step(act[0, 1])
print("PROBE " + json.dumps({
    "image_diff": int(np.abs(a["images"][0].cpu().numpy().astype(int) - b["images"].astype(int)).max()),
    "state_diff": float(np.abs(a["states"][0].cpu().numpy() - b["states"]).max()),
    "text": [a["task_descriptions"][0], b["task_descriptions"]],
    "final_state_diff": float(np.abs(res.final_obs["states"][0].cpu().numpy() - s2["states"]).max()),
    "truncated": res.truncated.cpu().numpy().tolist(), "final_mask": res.final_mask.tolist(),
    "next_start": res.obs["states"][0].cpu().numpy().tolist(),
    "low": batched.action_low.tolist(),
}))
"""


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_batched_backend_matches_the_worker_backend(pack: Path, task_code: None) -> None:
    """The GPU backend's batched logic (run here on a one-env CPU simulation) gives the worker backend's start,
    instruction and steps for the same id, and truncates with a same-step autoreset."""
    (r,) = _run_probe(pack, _BATCHED_PROBE, timeout=380)
    assert r["image_diff"] == 0 and r["state_diff"] < 1e-6 and r["text"][0] == r["text"][1]
    assert r["final_state_diff"] < 1e-5
    assert r["truncated"] == [[False, True]] and r["final_mask"] == [True]
    np.testing.assert_allclose(r["next_start"][:6], INITIAL_QPOS[:6], atol=1e-4)  # already the next start
    assert r["low"][6] == 0.0  # the reference's gripper setup: [0, 1], above 0.5 opens


@pytest.mark.slow
@pytest.mark.timeout(900)  # a hang guard: ~60 s on 2 idle cores, 471 s measured at load 15-22
def test_scripted_expert_puts_the_object_on_the_plate(pack: Path, task_code: None, tmp_path) -> None:
    """The scripted expert on two fixed starts of the stand-in scene, recorded by the demo writer in two worker
    processes (one start each, in parallel; they read the asset folders the parent resolves, here `asset_dir`):
    it succeeded 13/13 times in 23-28 decisions, so one failure of two is already a regression."""
    from vla_envs import demo_settings, load_demos
    from vla_envs.maniskill.put_on_plate_demos import generate_put_on_plate_demos

    cfg = _cfg(pack, image_size=32, max_episode_steps=30, reward_mode="dense")
    settings = demo_settings(cfg, episodes_per_task=2, seed=3)
    assert settings.pop("env_type") == "maniskill" and settings["task"] == MAIN
    generate_put_on_plate_demos(
        tmp_path / "demos", **settings, num_workers=2, episodes_per_job=1, progress=False
    )
    data = load_demos(tmp_path / "demos")
    meta = data["meta"]
    assert [ep["success"] for ep in meta["episodes"]] == [True, True], meta["episodes"]
    assert len({ep["episode_id"] for ep in meta["episodes"]}) == 2  # two different starts
    assert all(ep["trial"] >= 100_000 for ep in meta["episodes"])  # never a training or evaluation trial
    n = meta["num_steps"]
    assert data["images"].shape == (n, 32, 32, 3) and data["states"].shape == (n, STATE_DIM)
    actions = data["actions"]
    assert actions.shape == (n, 7)
    assert np.abs(actions[:, :3]).max() <= 0.04 + 1e-6 and np.abs(actions[:, 5]).max() <= 0.5 + 1e-6
    assert set(np.unique(actions[:, 6]).tolist()) == {0.0, 1.0}  # "threshold" gripper: 1 opens, 0 closes
    for k, ep in enumerate(meta["episodes"]):
        rows = data["episode_index"] == k
        assert data["successes"][rows][-1] == 1 and data["successes"][rows][:-1].sum() == 0  # cut at success
        assert ep["instruction"].startswith("put ") and ep["instruction"].endswith(" on plate")
        # dense relative reward: grasped (0.1) and held 5 steps (0.1) came before the success while grasped (1.0)
        assert data["rewards"][rows].sum() == pytest.approx(1.2, abs=1e-5)
