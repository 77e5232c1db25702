"""The actor's optimizer-step counts survive a checkpoint: saved as `optimizer_steps` and `policy_step`; a
checkpoint that names the count `global_step` (the older key) loads the same."""

from __future__ import annotations

from pathlib import Path

from train_embodied.config.sections import AlgorithmSection, ModelSection, OptimSection
from train_embodied.workers import ActorWorker
from vla_infra import save_checkpoint


def _actor() -> ActorWorker:
    section = ModelSection(image_size=32, extra={"patch_size": 16, "hidden_size": 64})
    return ActorWorker(
        section,
        {"action_dim": 4},
        OptimSection(lr=1e-3),
        AlgorithmSection(),
        micro_batch_size=8,
        global_batch_size=16,
        seed=0,
    )


def test_the_step_counts_round_trip_through_a_checkpoint(tmp_path: Path) -> None:
    actor = _actor()
    actor.optimizer_step, actor.policy_step = 12, 6
    actor.save_checkpoint(str(tmp_path / "ckpt"), {"epoch": 2})
    again = _actor()
    state = again.load_checkpoint(str(tmp_path / "ckpt"))
    assert state["optimizer_steps"] == 12 and state["epoch"] == 2
    assert again.optimizer_steps() == 12 and again.policy_step == 6


def test_a_checkpoint_with_the_older_global_step_key_loads(tmp_path: Path) -> None:
    actor = _actor()
    save_checkpoint(tmp_path / "old", actor.policy, actor.optimizer, {"epoch": 1, "global_step": 7})
    again = _actor()
    again.load_checkpoint(str(tmp_path / "old"))
    assert again.optimizer_steps() == 7 and again.policy_step == 7  # no policy_step: every step trained it
