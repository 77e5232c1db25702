"""One meaning for the run's length and its x-axis: `runner.max_steps` caps the training iterations as the reference
framework's does, the metrics of iteration N are logged at step N next to checkpoint `global_step_N`, the
optimizer steps are a separate count, and a resumed run continues the iteration count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from train_embodied.config import load_train_config
from train_embodied.config.build import ConfigError
from train_embodied.config.sections import RunnerSection
from train_embodied.run_state import RunState
from train_embodied.testing import PPO_TINY, read_metrics, run_train
from vla_infra import MANIFEST

# 2 envs x 8 decisions = 16 samples = one minibatch of 16, update_epoch 2: 2 optimizer steps per iteration
RUN = [
    *PPO_TINY,
    "runner.max_epochs=5",
    "runner.save_interval=1",
    "runner.eval_before_train=false",
    "runner.eval_after_train=false",
]
STEPS_PER_ITERATION = 2


def test_max_steps_caps_max_epochs() -> None:
    assert RunnerSection(max_epochs=5).num_iterations == 5
    assert RunnerSection(max_epochs=5, max_steps=2).num_iterations == 2
    assert RunnerSection(max_epochs=2, max_steps=7).num_iterations == 2
    assert RunnerSection(max_epochs=5, max_steps=0).num_iterations == 0  # the reference: 0 trains nothing
    assert RunnerSection(max_steps=-2).check("runner") == [
        "runner.max_steps=-2 is invalid: must be >= 0 (or -1)"
    ]
    with pytest.raises(ConfigError, match=r"runner.max_steps=-3 is invalid"):
        load_train_config("metaworld_ppo_tiny_cpu", ["runner.max_steps=-3"], check_paths=False)


def test_run_state_round_trip_and_earlier_checkpoint_keys() -> None:
    state = RunState(
        iteration=3, env_steps=48, weight_version=4, optimizer_steps=6, history=[{"iteration": 3}]
    )
    again = RunState.from_dict(state.to_dict())
    assert again.to_dict() == state.to_dict()
    # earlier trainer states: the iteration as `epoch`, the weight version as `version`, the actor's optimizer
    # steps as `global_step` (which the actor still writes beside the trainer's keys)
    old = RunState.from_dict({"epoch": 2, "env_steps": 32, "version": 3, "global_step": 4, "history": []})
    assert (old.iteration, old.env_steps, old.weight_version, old.optimizer_steps) == (2, 32, 3, 4)
    assert old.before == {} and old.eval_tables == {}


@pytest.fixture(scope="module")
def capped_run(tmp_path_factory) -> tuple[Path, dict]:
    """max_epochs 5 capped to 2 iterations by max_steps, a checkpoint after each."""
    pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")
    log_dir = tmp_path_factory.mktemp("capped") / "run"
    return log_dir, run_train("metaworld_ppo_tiny_cpu", [*RUN, "runner.max_steps=2"], log_dir)


@pytest.mark.slow
def test_max_steps_caps_the_iterations_and_the_log_step_is_the_iteration(capped_run) -> None:
    log_dir, summary = capped_run
    assert summary["iterations"] == summary["epochs"] == 2
    assert summary["optimizer_steps"] == 2 * STEPS_PER_ITERATION
    rows = [r for r in read_metrics(log_dir) if "train/actor/policy_loss" in r]
    assert [r["step"] for r in rows] == [1, 2]
    assert [r["train/actor/optimizer_steps"] for r in rows] == [STEPS_PER_ITERATION, 2 * STEPS_PER_ITERATION]
    assert [h["iteration"] for h in summary["history"]] == [1, 2]
    saved = sorted(p.name for p in (log_dir / "checkpoints").iterdir())
    assert saved == ["global_step_1", "global_step_2"]
    for name in saved:  # the manifest names the checkpoint's step
        manifest = json.loads((log_dir / "checkpoints" / name / MANIFEST).read_text())
        assert manifest["step"] == int(name.rsplit("_", 1)[1])


@pytest.mark.slow
def test_resume_continues_the_iteration_count(capped_run, tmp_path: Path) -> None:
    first, _ = capped_run
    resumed = tmp_path / "resumed"
    summary = run_train(
        "metaworld_ppo_tiny_cpu",
        [*RUN, "runner.max_steps=3", f"runner.resume_dir={first / 'checkpoints' / 'global_step_1'}"],
        resumed,
    )
    assert summary["iterations"] == 3 and summary["optimizer_steps"] == 3 * STEPS_PER_ITERATION
    rows = [r for r in read_metrics(resumed) if "train/actor/policy_loss" in r]
    assert [r["step"] for r in rows] == [2, 3]  # iterations 2 and 3, after the checkpoint's 1
    assert [r["train/actor/optimizer_steps"] for r in rows] == [
        2 * STEPS_PER_ITERATION,
        3 * STEPS_PER_ITERATION,
    ]
    assert [h["iteration"] for h in summary["history"]] == [
        1,
        2,
        3,
    ]  # iteration 1's row came with the checkpoint
    assert sorted(p.name for p in (resumed / "checkpoints").iterdir()) == ["global_step_2", "global_step_3"]
