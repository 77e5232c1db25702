"""End to end on the CPU with the local backend: PPO and GRPO iterations on real MetaWorld with the tiny
OpenVLA-OFT, exact resume, evaluation-only mode with videos, and the supervised warm start."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from train_embodied.testing import GRPO_TINY, PPO_TINY, read_metrics, run_train

pytestmark = pytest.mark.slow
pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")

REFERENCE_METRICS = [
    "train/actor/policy_loss",
    "train/actor/approx_kl",
    "train/actor/clip_fraction",
    "train/actor/clipped_ratio",
    "train/actor/grad_norm",
    "train/actor/lr",
    "train/entropy_loss",
    "train/loss",
    "rollout/advantages_mean",
    "rollout/advantages_max",
    "rollout/advantages_min",
    "rollout/rewards",
    "env/num_trajectories",
    "env/worker_restarts",
    "env/lost_episodes",
    "env/restart_time_s",
    "time/step",
    "time/sync_weights",
    "time/generate_rollouts",
    "time/actor_update",
]
CRITIC_METRICS = [
    "train/critic/value_loss",
    "train/critic/explained_variance",
    "train/critic/value_clip_ratio",
    "rollout/value_targets_mean",  # the GAE returns; rollout/returns_mean is the mean episode return
]


# two iterations with a linear lr decay: the second trains at half the lr, and the resume tests check that a
# resumed run decays exactly as an uninterrupted one
PPO_RUN = [*PPO_TINY, "runner.max_epochs=2", "actor.optim.lr_decay_style=linear", "runner.eval_greedy=true"]


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory) -> Path:
    """Two PPO iterations with a checkpoint after each (shared by the PPO and resume tests)."""
    log_dir = tmp_path_factory.mktemp("ppo") / "run"
    run_train("metaworld_ppo_tiny_cpu", [*PPO_RUN, "runner.save_interval=1"], log_dir)
    return log_dir


def test_ppo_iterations_log_reference_metrics(ppo_run: Path) -> None:
    summary = json.loads((ppo_run / "summary.json").read_text())
    for key in (
        "success_before_rl",
        "success_after_rl",
        "success_before_rl_greedy",
        "success_after_rl_greedy",
    ):
        assert 0.0 <= summary[key] <= 1.0
    assert summary["epochs"] == 2
    assert summary["env_steps"] == 2 * 2 * 8  # epochs x envs x decisions (chunk of 1)
    rows = [r for r in read_metrics(ppo_run) if "train/actor/policy_loss" in r]
    assert [r["step"] for r in rows] == [1, 2]
    for key in REFERENCE_METRICS + CRITIC_METRICS:
        assert key in rows[0], key
    # the actor recomputes exactly what the rollout sampled: first-epoch ratio 1, so tiny KL
    assert rows[0]["train/actor/first_minibatch_approx_kl"] < 1e-6
    assert rows[0]["train/actor/num_samples"] == 16
    # linear decay over 2 iterations: the config's lr, then half of it
    assert rows[0]["train/actor/lr"] == pytest.approx(3e-4)
    assert rows[1]["train/actor/lr"] == pytest.approx(1.5e-4)
    assert math.isfinite(rows[1]["train/critic/value_loss"])
    evals = [r for r in read_metrics(ppo_run) if "eval/success_once" in r]
    assert [r["step"] for r in evals] == [0, 2] and "eval/success_once_greedy" in evals[0]
    events = list((ppo_run / "tensorboard").glob("events.out.tfevents*"))
    assert events, sorted(str(p.relative_to(ppo_run)) for p in ppo_run.rglob("events.out.tfevents*"))
    assert (ppo_run / "checkpoints" / "global_step_1" / "COMPLETE").exists()
    assert (ppo_run / "checkpoints" / "global_step_2" / "COMPLETE").exists()
    assert (ppo_run / "policy" / "config.json").exists()


def test_resume_matches_an_uninterrupted_run(ppo_run: Path, tmp_path: Path) -> None:
    """N/2 iterations + resume for N/2 == N iterations: identical weights and metrics."""
    resumed = tmp_path / "resumed"
    run_train(
        "metaworld_ppo_tiny_cpu",
        [
            *PPO_RUN,
            f"runner.resume_dir={ppo_run / 'checkpoints' / 'global_step_1'}",
            "runner.eval_after_train=false",
        ],
        resumed,
    )
    full = load_file(str(ppo_run / "checkpoints" / "global_step_2" / "model.safetensors"))
    again = load_file(str(resumed / "checkpoints" / "global_step_2" / "model.safetensors"))
    assert full.keys() == again.keys()
    start = load_file(str(ppo_run / "checkpoints" / "global_step_1" / "model.safetensors"))
    assert any(not (start[k] == full[k]).all() for k in full), "the second iteration changed nothing"
    for key in full:
        assert (full[key] == again[key]).all(), key
    row_full = next(r for r in read_metrics(ppo_run) if r["step"] == 2 and "train/loss" in r)
    row_again = next(r for r in read_metrics(resumed) if r["step"] == 2 and "train/loss" in r)
    for key in ("train/loss", "train/actor/policy_loss", "train/critic/value_loss", "rollout/rewards"):
        assert row_full[key] == row_again[key], key
    assert json.loads((resumed / "summary.json").read_text())["env_steps"] == 32


def _comparable(rows: list[dict[str, float]]) -> dict[int, dict[str, float]]:
    """step -> every metric logged at that step, wall-clock timings left out."""
    out: dict[int, dict[str, float]] = {}
    for row in rows:
        kept = {k: v for k, v in row.items() if not k.startswith("time/") and k != "env/restart_time_s"}
        out.setdefault(int(row["step"]), {}).update(kept)
    return out


def test_sigkill_then_auto_resume_reproduces_the_uninterrupted_run(ppo_run: Path, tmp_path: Path) -> None:
    """The trainer SIGKILLed at a random moment after its first checkpoint; the same command with
    runner.resume_dir=auto continues in the same run folder and logs exactly the uninterrupted run's metrics."""
    command = [
        sys.executable, "-m", "train_embodied.cli", "metaworld_ppo_tiny_cpu", *PPO_RUN,
        "runner.save_interval=1", "runner.resume_dir=auto",
        f"runner.logger.log_path={tmp_path}",
    ]  # fmt: skip
    runs = tmp_path / "metaworld_ppo_tiny_cpu"
    first = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        deadline = time.time() + 300
        while not list(runs.glob("*/checkpoints/global_step_1/COMPLETE")) and first.poll() is None:
            assert time.time() < deadline, "no checkpoint within 300 s"
            time.sleep(0.05)
        # somewhere in the second iteration, its checkpoint or the final eval (about 1.3 s together)
        time.sleep(random.Random(os.getpid()).uniform(0.0, 0.3))
        first.send_signal(signal.SIGKILL)
        first.wait(60)
        assert first.returncode == -signal.SIGKILL, "the first run ended before the kill"
    finally:
        os.killpg(first.pid, signal.SIGKILL) if first.poll() is None else None
    (run_dir,) = list(runs.iterdir())
    assert not (run_dir / "summary.json").exists()
    second = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"[resume] from {run_dir}/checkpoints/global_step_" in second.stdout
    assert list(runs.iterdir()) == [run_dir]  # continued in the same folder
    full = load_file(str(ppo_run / "checkpoints" / "global_step_2" / "model.safetensors"))
    again = load_file(str(run_dir / "checkpoints" / "global_step_2" / "model.safetensors"))
    assert all((full[k] == again[k]).all() for k in full)
    assert _comparable(read_metrics(run_dir)) == _comparable(read_metrics(ppo_run))


def test_grpo_iterations_with_groups(tmp_path: Path) -> None:
    log_dir = tmp_path / "grpo"
    summary = run_train(
        "metaworld_grpo_tiny_cpu", [*GRPO_TINY, "runner.max_epochs=2", "runner.eval_greedy=false"], log_dir
    )
    assert "success_after_rl" in summary and "success_after_rl_greedy" not in summary
    rows = [r for r in read_metrics(log_dir) if "train/actor/num_samples" in r]
    assert len(rows) == 2
    for key in ("rollout/scores_mean", "rollout/advantages_mean", "env/num_trajectories"):
        assert key in rows[0]
    assert not any(k.startswith("train/critic/") for k in rows[0])
    # auto_reset off: each env runs exactly one episode per rollout (4 envs -> 4 trajectories, <= 6 decisions)
    assert rows[0]["env/num_trajectories"] == 4
    assert summary["env_steps"] <= 2 * 4 * 6


def test_grpo_warns_when_the_filter_drops_every_group(tmp_path: Path, capsys) -> None:
    # bounds no score can reach: a 6-decision episode scores at most 6 x 4 sim steps x 10 (MetaWorld's reward cap)
    overrides = [o for o in GRPO_TINY if not o.startswith("algorithm.filter_rewards")]
    bounds = ["algorithm.rewards_lower_bound=1000", "algorithm.rewards_upper_bound=2000"]
    log_dir = tmp_path / "grpo_filtered"
    run_train(
        "metaworld_grpo_tiny_cpu",
        [
            *overrides,
            *bounds,
            "runner.max_epochs=2",
            "runner.eval_greedy=false",
            "runner.eval_before_train=false",
        ],
        log_dir,
    )
    rows = [r for r in read_metrics(log_dir) if "rollout/kept_group_fraction" in r]
    assert [r["rollout/kept_group_fraction"] for r in rows] == [0.0, 0.0]
    assert all(r["train/actor/num_samples"] == 0 for r in rows)
    out = capsys.readouterr().out
    assert out.count("every group's mean score was outside [1000.0, 2000.0]") == 1  # once per run
    assert "algorithm.filter_rewards=false" in out


def test_eval_only_writes_videos(tmp_path: Path, capsys) -> None:
    from train_embodied.cli import eval_main

    log_dir = tmp_path / "eval"
    assert (
        eval_main(
            [
                "metaworld_ppo_tiny_cpu",
                *PPO_TINY,
                "runner.eval_greedy=true",
                "env.eval.video_cfg.save_video=true",
                f"runner.logger.log_dir={log_dir}",
            ]
        )
        == 0
    )
    summary = json.loads((log_dir / "summary.json").read_text())
    assert "success_eval" in summary and "success_eval_greedy" in summary
    assert summary["env_steps"] == 0 and not (log_dir / "checkpoints").exists()
    videos = list((log_dir / "video" / "eval").rglob("*.mp4"))
    assert videos and all(v.stat().st_size > 0 for v in videos)
    out = capsys.readouterr().out
    assert f"log dir: {log_dir}" in out and "videos:" in out and "tensorboard" in out


def test_sft_checkpoint_is_loadable_by_model_path(tmp_path: Path) -> None:
    """vla-sft: demos -> behaviour cloning -> a folder that actor.model.model_path accepts."""
    from train_embodied.cli import sft_main

    out = tmp_path / "sft"
    assert (
        sft_main(
            [
                "metaworld_ppo_tiny_cpu",
                *PPO_TINY,
                "sft.num_demos=2",
                "sft.steps=3",
                "sft.batch_size=8",
                f"sft.output_dir={out}",
                "runner.progress_bar=false",
            ]
        )
        == 0
    )
    info = json.loads((out / "sft_summary.json").read_text())
    assert info["num_demos"] == 2 and info["sft_steps"] == 3 and math.isfinite(info["final_loss"])
    from train_embodied.config import load_train_config
    from train_embodied.policy_io import build_policy_for_run

    tc = load_train_config("metaworld_ppo_tiny_cpu", [*PPO_TINY, f"actor.model.model_path={out / 'policy'}"])
    policy = build_policy_for_run(tc.actor.model, {"action_dim": 4})
    assert policy.config.add_value_head


def test_pipelined_rollout_with_two_env_stages(tmp_path: Path) -> None:
    """rollout.pipeline_stage_num=2: two env groups, the policy acts on one while the other simulates."""
    log_dir = tmp_path / "pipe"
    summary = run_train(
        "metaworld_ppo_tiny_cpu",
        [
            *PPO_TINY,
            "rollout.pipeline_stage_num=2",
            "env.train.envs_per_worker=1",
            "runner.max_epochs=1",
            "runner.eval_before_train=false",
            "runner.eval_greedy=false",
        ],
        log_dir,
    )
    assert {"env_train_0", "env_train_1"} <= set(summary["worker_pids"])
    row = next(r for r in read_metrics(log_dir) if "train/actor/num_samples" in r)
    assert row["train/actor/num_samples"] == 16 and row["train/actor/first_minibatch_approx_kl"] < 1e-6
    assert summary["env_steps"] == 16
