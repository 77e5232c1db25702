"""The step-cost options of the PutOnPlateInScene25 tasks (`vla_envs.maniskill.put_on_plate_cost`) keep the task.

One child process (the task code reads its asset folders once per process) builds `PutOnPlateInScene25Main-v3` three
times on the stand-in pack: as written (`grasp_check="all"`, 640 x 480), with the grasp flag asked only about the
episode's object, and rendered at 160 x 120 with scaled intrinsics. The scripted expert drives the first from one
start and the same actions go to all three: every step's robot joint positions and velocities, object and plate
poses, reward and success flag must be bit-identical.
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

from vla_envs import EnvConfig
from vla_envs.maniskill.options import resolve_options
from vla_envs.maniskill.put_on_plate_cost import check_render_scale, scaled_hw, scaled_intrinsic

REPO = Path(__file__).resolve().parents[3]
MAIN = "PutOnPlateInScene25Main-v3"


def _cfg(**extra) -> EnvConfig:
    return EnvConfig(env_type="maniskill", task=MAIN, image_size=64, extra=extra)


# ------------------------------------------------------------------------------------------- no simulator
def test_scaled_intrinsics_keep_the_view() -> None:
    k = np.array([[623.588, 0, 319.501], [0, 623.588, 239.545], [0, 0, 1]])
    q = scaled_intrinsic(k, 0.25)
    assert q[0, 0] == pytest.approx(623.588 / 4) and q[1, 1] == pytest.approx(623.588 / 4)
    # a pixel centre's ray is the same: pixel (u, v) at full size is (u + 0.5) / 4 - 0.5 at a quarter
    for u, v in ((0.0, 0.0), (319.5, 239.5), (639.0, 479.0)):
        full = np.linalg.solve(k, [u, v, 1.0])
        small = np.linalg.solve(q, [(u + 0.5) / 4 - 0.5, (v + 0.5) / 4 - 0.5, 1.0])
        np.testing.assert_allclose(full, small, atol=1e-12)
    assert scaled_hw(0.25) == (120, 160) and scaled_hw(1.0) == (480, 640)


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"render_scale": 0.33}, "whole pixels"),
        ({"render_scale": 0.0}, r"\(0, 1\]"),
        ({"render_scale": 2}, r"\(0, 1\]"),
        ({"render_scale": "small"}, r"\(0, 1\]"),
        ({"render_scale": 0.0625}, "at least image_size"),  # 40 x 30 < 64 px
        ({"grasp_check": "none"}, "'source'"),
    ],
)
def test_bad_cost_options_name_the_key(extra: dict, match: str) -> None:
    key = next(iter(extra))
    with pytest.raises(ValueError, match=rf"extra\['{key}'\].*{match}"):
        resolve_options(_cfg(**extra))


def test_cost_options_are_put_on_plate_only_and_default_to_the_task_picture() -> None:
    opts = resolve_options(_cfg())
    assert opts.render_scale == 1.0 and opts.grasp_check == "source"  # the picture as written; same flags
    assert check_render_scale(0.5) is None and check_render_scale(True) is not None
    with pytest.raises(ValueError, match=r"render_scale.*only the PutOnPlateInScene25"):
        resolve_options(EnvConfig(env_type="maniskill", task="PickCube-v1", extra={"render_scale": 0.5}))


# ------------------------------------------------------------------------------------------- simulator
_PROBE = """
import json, sys
import numpy as np
from pathlib import Path
from vla_envs import EnvConfig
from vla_envs.maniskill import put_on_plate
pack = sys.argv[1]
put_on_plate.prepare_process(Path(pack), Path(pack))
from vla_envs.maniskill.cpu_sim import PutOnPlateSim
from vla_envs.maniskill.options import resolve_options
from vla_envs.maniskill.put_on_plate_expert import PutOnPlateExpert

def build(**extra):
    cfg = EnvConfig(env_type="maniskill", task="PutOnPlateInScene25Main-v3", image_size=64, max_episode_steps=40,
                    num_trials_per_task=1000, reward_mode="dense", extra={"asset_dir": pack, **extra})
    return PutOnPlateSim(cfg, resolve_options(cfg))

def world(sim):
    b = sim.base
    parts = [b.agent.robot.get_qpos()[0], b.agent.robot.get_qvel()[0]]
    parts += [b.objs[n].pose.raw_pose[0] for n in (b.source_obj_name, b.target_obj_name)]
    return np.concatenate([p.cpu().numpy() for p in parts])

sims = {"written": build(grasp_check="all"), "source": build(grasp_check="source"),
        "quarter": build(grasp_check="all", render_scale=0.25)}
expert = PutOnPlateExpert()
starts = {k: s.reset(7) for k, s in sims.items()}
expert.reset()
rows = {k: {"same_world": [], "rewards": [], "success": [], "image_diff": []} for k in sims}
for t in range(35):
    action = expert.act(sims["written"].base)
    ref = None
    for k, sim in sims.items():
        obs, reward, success, _ = sim.step(action)
        w = world(sim)
        ref = (w, obs) if ref is None else ref
        rows[k]["same_world"].append(bool(np.array_equal(w, ref[0])))
        rows[k]["rewards"].append(reward)
        rows[k]["success"].append(success)
        rows[k]["image_diff"].append(float(np.abs(obs["images"].astype(int) - ref[1]["images"].astype(int)).mean()))
    if success:
        break
raw = sims["quarter"].base.get_obs()["sensor_data"]["3rd_view_camera"]["rgb"]
print("PROBE " + json.dumps({"rows": rows, "quarter_render": list(raw.shape),
      "start_image_diff": float(np.abs(starts["quarter"]["images"].astype(int)
                                       - starts["written"]["images"].astype(int)).mean())}))
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict:
    pytest.importorskip("mani_skill", reason="mani-skill not installed (pip install 'vla-envs[maniskill]')")
    pytest.importorskip("rlinf", reason="the task code is not installed (pip install --no-deps rlinf==0.3.0)")
    from vla_envs.maniskill import maniskill_unavailable_reason

    reason = maniskill_unavailable_reason()
    if reason is not None:
        pytest.skip(f"ManiSkill cannot create envs here: {reason}")
    pack = tmp_path_factory.mktemp("maniskill_standin")
    script = REPO / "scripts" / "maniskill_standin_assets.py"
    subprocess.run([sys.executable, str(script), "--out", str(pack)], check=True, timeout=120)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_PROBE), str(pack)],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=1100,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("PROBE ")]
    return json.loads(line[6:])


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a hang guard: one first build (13-70 s on llvmpipe) and ~25 steps of three envs
def test_grasp_check_of_the_source_object_keeps_states_rewards_and_success(probe: dict) -> None:
    written, source = probe["rows"]["written"], probe["rows"]["source"]
    assert all(source["same_world"]) and source["rewards"] == written["rewards"]
    assert source["success"] == written["success"] and source["image_diff"] == [0.0] * len(
        source["image_diff"]
    )
    # the episode went through a grasp, a held grasp and the success (dense relative reward 0.1 + 0.1 + 1.0)
    assert written["success"][-1] and sum(written["rewards"]) == pytest.approx(1.2, abs=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_quarter_render_keeps_states_rewards_and_success_and_nearly_the_picture(probe: dict) -> None:
    written, quarter = probe["rows"]["written"], probe["rows"]["quarter"]
    assert probe["quarter_render"] == [1, 120, 160, 3]
    assert all(quarter["same_world"]) and quarter["rewards"] == written["rewards"]
    assert quarter["success"] == written["success"] and written["success"][-1]
    # the same view, drawn with fewer pixels: 64 px frames within a grey level on average (0.58 measured)
    assert 0.0 < probe["start_image_diff"] < 1.5 and max(quarter["image_diff"]) < 1.5
