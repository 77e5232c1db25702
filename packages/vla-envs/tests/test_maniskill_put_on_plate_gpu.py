"""PutOnPlateInScene25Main-v3 on ManiSkill's GPU backend (all rows in one CUDA process), on the stand-in assets.

Skips without CUDA or without the task code. The env is built in a child process: ManiSkill and the task code read
their asset folders once per process, at import.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mani_skill", reason="mani-skill not installed (pip install 'vla-envs[maniskill]')")
pytest.importorskip("rlinf", reason="the task code is not installed (pip install --no-deps rlinf==0.3.0)")
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (ManiSkill GPU simulation)", allow_module_level=True)

pytestmark = pytest.mark.gpu
STANDIN_SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "maniskill_standin_assets.py"

_PROBE = """
import json, sys, time
import numpy as np
import torch
from vla_envs import EnvConfig, make_env

B = 16
cfg = EnvConfig(env_type="maniskill", task="PutOnPlateInScene25Main-v3", num_envs=B, image_size=224,
                max_episode_steps=4, num_trials_per_task=802816, reward_mode="dense",
                extra={"sim_backend": "gpu", "asset_dir": sys.argv[1]})
t0 = time.perf_counter()
env = make_env(cfg)
ids = np.repeat(np.array([5, 90000, 400000, 802815]), 4)
obs = env.reset(reset_state_ids=ids)
build_s = time.perf_counter() - t0
images = torch.as_tensor(obs["images"])
same = all(bool((images[r] == images[r - r % 4]).all()) for r in range(B))
act = np.zeros((B, 2, 7), np.float32)
act[..., 2] = 0.01
act[..., 6] = 1.0
t0 = time.perf_counter()
res = env.chunk_step(act)
res2 = env.chunk_step(act)
torch.cuda.synchronize()
step_s = (time.perf_counter() - t0) / 4
print("PROBE " + json.dumps({
    "shape": list(images.shape), "cuda": images.is_cuda, "states": list(torch.as_tensor(obs["states"]).shape),
    "texts": obs["task_descriptions"][:1],
    "truncated": torch.as_tensor(res2.truncated).cpu().numpy().tolist()[0], "final": res2.final_mask.tolist()[0],
    "build_s": build_s, "step_s": step_s, "env_steps_per_s": B / step_s,
}))
env.close()
"""


def test_gpu_backend_runs_the_task_with_equal_starts_and_truncation(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    subprocess.run([sys.executable, str(STANDIN_SCRIPT), "--out", str(pack)], check=True, timeout=120)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_PROBE), str(pack)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (r,) = [json.loads(line[6:]) for line in out.stdout.splitlines() if line.startswith("PROBE ")]
    print(r)  # build time and env-steps/s, for benchmarks/RESULTS.md
    assert r["shape"] == [16, 224, 224, 3] and r["cuda"] and r["states"] == [16, 8]
    assert r["same_groups"] and r["texts"][0].startswith("put ")
    assert r["truncated"] == [False, True] and r["final"] is True  # 4th decision ends at chunk position 1
