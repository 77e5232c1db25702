"""The reference guides' metric names (this repository's test data, `data/guide_facts.yaml`) are logged with the
guides' meaning, and their launcher resumes a run.

One real tiny PPO run on MetaWorld (CPU) is started through `scripts/run_embodiment.sh` with
`runner.resume_dir=auto`, then the same command with one more iteration continues it in the same run folder.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from train_embodied.testing import PPO_TINY, read_metrics

pytestmark = pytest.mark.slow
pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")

sys.path.insert(0, str(Path(__file__).parent))
import guide_facts  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
#: The guides' metric names with the one of ours that is the same number (None: checked on its own below).
SAME_AS = {
    "actor/loss": "train/actor/policy_loss",
    "actor/value_loss": "train/critic/value_loss",
    "actor/entropy": "train/entropy_loss",
    "actor/grad_norm": "train/actor/grad_norm",
    "actor/lr": "train/actor/lr",
    "actor/approx_kl": "train/actor/approx_kl",
    "actor/pg_clipfrac": "train/actor/clip_fraction",
    "actor/value_clip_ratio": "train/critic/value_clip_ratio",
    "rollout/reward_mean": "env/return",
    "rollout/returns_mean": "env/return",
    "rollout/episode_length": "env/episode_len",
    "rollout/success_rate": "env/success_once",
    "env/success_rate": "env/success_once",
}
# a few decisions per episode, so that episodes end inside the 8-decision rollout; training videos switched on with
# the guides' top-level `video_cfg`
RUN = [
    *PPO_TINY,
    "env.train.max_episode_steps=3",
    "runner.eval_after_train=false",
    "runner.save_interval=1",
    "video_cfg.save_video=true",
]


def guide_metric_names() -> set[str]:
    return {name for facts in guide_facts.load_facts().values() for name in facts["metrics"]}


def launch(logs_root: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LOGS_ROOT": str(logs_root),
        "VLA_TRAIN": str(Path(sys.executable).parent / "vla-train"),
        "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"),
    }
    env.pop("LOG_DIR", None)
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "run_embodiment.sh"), "metaworld_ppo_tiny_cpu", *RUN, *overrides],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    root = tmp_path_factory.mktemp("logs")
    first = launch(root, "runner.max_epochs=1", "runner.resume_dir=auto")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    second = launch(root, "runner.max_epochs=2", "runner.resume_dir=auto")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    (run,) = root.iterdir()  # the second launch continued the first run's folder
    return run, second


def test_resume_dir_auto_continues_the_newest_run_of_the_config(resumed_run) -> None:
    run, second = resumed_run
    assert f"runner.resume_dir=auto: continuing {run}" in second.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["epochs"] == 2
    steps = [r["step"] for r in read_metrics(run) if "train/actor/policy_loss" in r]
    assert steps == [1, 2]  # iteration 1 from the first launch, iteration 2 from the resumed one


def test_every_metric_name_of_the_guides_is_logged_with_their_meaning(resumed_run) -> None:
    names = guide_metric_names()
    assert len(names) >= 30, sorted(names)
    run, _ = resumed_run
    rows = [r for r in read_metrics(run) if "train/actor/policy_loss" in r]
    for row in rows:
        missing = sorted(n for n in names if n not in row)
        assert not missing, f"guide metric names not logged at step {row['step']}: {missing}"
        for theirs, ours in SAME_AS.items():
            # (float64 here, float32 means in ours)
            assert math.isclose(row[theirs], row[ours], rel_tol=1e-6, abs_tol=1e-9), (theirs, ours)
        assert row["rollout/reward_std"] >= 0.0
        # MetaWorld ends an episode on success (termination) or at max_episode_steps (truncation): the
        # terminated share of the ended episodes is their success rate
        assert math.isclose(row["env/termination_rate"], row["env/success_once"], abs_tol=1e-9)
        # 2 envs x 8 decisions of one env step each; the dense reward of every step taken, averaged
        assert row["env/step_reward"] > 0.0
        assert "rollout/value_targets_mean" in row  # our GAE-returns mean keeps a name of its own


def test_training_videos_carry_the_env_rank_and_the_iteration(resumed_run) -> None:
    run, _ = resumed_run
    videos = sorted(p.name for p in (run / "video" / "train").glob("*.mp4"))
    assert "train_rank0_iter0_env0_ep0.mp4" in videos, videos
    names = [re.fullmatch(r"train_rank0_iter(\d+)_env0_ep\d+\.mp4", n) for n in videos]
    assert all(names), videos  # video_cfg.max_envs=1: row 0 only
    # iteration 0 from the first launch, iteration 1 from the resumed one (its episodes end in that iteration)
    assert {int(m.group(1)) for m in names} == {0, 1}, videos
