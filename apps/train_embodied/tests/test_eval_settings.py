"""Evaluation as the reference guides describe it: `rollout.do_sample=false` evaluates with greedy decisions,
`env.eval.rollout_epoch` (the reference's `algorithm.eval_rollout_epoch`) runs the held-out episodes that many times,
evaluation-only runs (`runner.only_eval`) evaluate and train nothing, and evaluation before training is opt-in."""

from __future__ import annotations

from pathlib import Path

import pytest

from train_embodied.config import ConfigError, load_train_config
from train_embodied.config.sections import RunnerSection
from train_embodied.testing import TINY, read_metrics, run_train

CONFIG = "metaworld_ppo_tiny_cpu"


def test_rollout_epoch_spellings_of_the_reference() -> None:
    tc = load_train_config(
        CONFIG, ["env.train.rollout_epoch=3", "algorithm.eval_rollout_epoch=2"], check_paths=False
    )
    assert tc.algorithm.rollout_epoch == 3 and tc.eval_run.rollout_epoch == 2
    tc = load_train_config(CONFIG, ["env.eval.rollout_epoch=4"], check_paths=False)
    assert tc.eval_run.eval_repeats == 4 and tc.algorithm.rollout_epoch == 1
    # unset, the config's own algorithm.rollout_epoch stays, and an evaluation runs its episodes once
    tc = load_train_config("libero_10_grpo_openvlaoft", [], check_paths=False)
    assert tc.algorithm.rollout_epoch == 16 and tc.eval_run.eval_repeats == 1
    with pytest.raises(
        ConfigError, match=r"env\.train\.rollout_epoch=3 conflicts with algorithm\.rollout_epoch=2"
    ):
        load_train_config(
            CONFIG, ["env.train.rollout_epoch=3", "algorithm.rollout_epoch=2"], check_paths=False
        )
    with pytest.raises(ConfigError, match=r"env\.eval\.rollout_epoch=0 is invalid"):
        load_train_config(CONFIG, ["env.eval.rollout_epoch=0"], check_paths=False)


def test_do_sample_false_is_greedy_evaluation_and_refused_for_training() -> None:
    with pytest.raises(ConfigError, match=r"rollout\.do_sample=False is not supported in a training run"):
        load_train_config(CONFIG, ["rollout.do_sample=false"], check_paths=False)
    tc = load_train_config(CONFIG, ["rollout.do_sample=false", "runner.only_eval=true"], check_paths=False)
    assert tc.rollout.do_sample is False


def test_evaluation_before_training_is_opt_in() -> None:
    assert RunnerSection().eval_before_train is False
    tc = load_train_config("metaworld_50_grpo_openvlaoft", [], check_paths=False)
    assert tc.runner.eval_before_train is False


@pytest.mark.slow
def test_eval_only_run_repeats_its_episodes_greedily(tmp_path: Path) -> None:
    """`vla-eval`'s run on real MetaWorld with the tiny policy: 2 held-out episodes x rollout_epoch 2, greedy
    (do_sample false) only, and no training; env row 0 runs one episode of each repeat."""
    overrides = [
        *TINY,
        "runner.only_eval=true",
        "rollout.do_sample=false",
        "runner.eval_greedy=false",
        "env.eval.rollout_epoch=2",
        "env.eval.video_cfg.save_video=true",
        "env.eval.video_cfg.max_envs=1",
    ]
    summary = run_train(CONFIG, overrides, tmp_path / "run")
    rows = read_metrics(tmp_path / "run")
    evals = [r for r in rows if any(k.startswith("eval/") for k in r)]
    assert len(evals) == 1, rows
    row = evals[0]
    assert row["eval/num_trajectories_greedy"] == 4  # num_episodes 2 x rollout_epoch 2
    assert "eval/success_once" not in row  # no sampled evaluation
    assert not any("train/actor/policy_loss" in r for r in rows)
    assert "success_eval_greedy" in summary and "success_eval" not in summary
    # the evaluation's videos name the env rank and the iteration (0: no training), one per episode of row 0
    videos = sorted(p.name for p in (tmp_path / "run" / "video" / "eval").glob("*.mp4"))
    assert videos == ["eval_rank0_iter0_env0_ep0.mp4", "eval_rank0_iter0_env0_ep1.mp4"], videos


def test_guides_video_dir_interpolation_lands_in_the_run_folder(tmp_path: Path) -> None:
    """`video_base_dir: ${runner.logger.log_path}/video/eval`, as the guides write it, is the run folder's
    video/eval (the reference's launcher gives every run its own log_path); other folders stay as written."""
    run = tmp_path / "runs" / "x" / "stamp"
    tc = load_train_config(
        CONFIG,
        [
            f"runner.logger.log_path={tmp_path / 'runs'}",
            f"runner.logger.log_dir={run}",
            "env.eval.video_cfg.video_base_dir=${runner.logger.log_path}/video/eval",
            "video_cfg.video_base_dir=${runner.logger.log_path}/video/train",
        ],
        check_paths=False,
    )
    assert tc.env_eval.video.video_base_dir == f"{run}/video/eval"
    assert tc.env_train.video.video_base_dir == f"{run}/video/train"
    tc = load_train_config(
        CONFIG,
        [f"runner.logger.log_dir={run}", f"env.eval.video_cfg.video_base_dir={tmp_path}/v"],
        check_paths=False,
    )
    assert tc.env_eval.video.video_base_dir == f"{tmp_path}/v"
    # a shipped config written with the guides' spelling
    tc = load_train_config("libero_10_grpo_openvlaoft", [f"runner.logger.log_dir={run}"], check_paths=False)
    assert tc.env_eval.video.video_base_dir == f"{run}/video/eval"
