"""`actor.enable_offload` / `rollout.enable_offload` end to end (local backend, real MetaWorld, tiny OpenVLA-OFT):
the workers are offloaded at the phase boundaries the runner has, and a run with offload trains bit-identically
to one without (on the CPU an offload moves every tensor into fresh host storage and back)."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors.torch import load_file

from train_embodied.testing import PPO_TINY, read_metrics, run_train

pytestmark = pytest.mark.slow
pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")

RUN = [*PPO_TINY, "runner.max_epochs=2", "runner.eval_before_train=false", "runner.eval_greedy=false"]
OFFLOAD = ["actor.enable_offload=true", "rollout.enable_offload=true"]


def test_offload_state_at_phase_boundaries(tmp_path: Path) -> None:
    """Drive one iteration's phases by hand (as runner.run does) and ask the workers where their tensors are."""
    from train_embodied.advantages import compute_advantages, flatten_for_update
    from train_embodied.config import load_train_config
    from train_embodied.rollout import collect_rollout
    from train_embodied.run_workers import RunWorkers

    tc = load_train_config("metaworld_ppo_tiny_cpu", [*RUN, *OFFLOAD, f"runner.logger.log_dir={tmp_path}"])
    actor_off = {"model": True, "optimizer": True}
    with RunWorkers(tc) as w:
        assert w.actor is not None
        assert w.actor.offload_state() == actor_off and w.rollout.offload_state() == {"model": True}
        w.rollout.load_weights(w.actor.state_dict(), 1)  # the actor exports and goes back to host memory
        assert w.actor.offload_state() == actor_off and w.rollout.offload_state() == {"model": False}
        batch = collect_rollout(
            w.env_train,
            w.rollout,
            num_decisions=8,
            reset_kwargs=[{"seed": 0}],
            bootstrap_truncation=True,
            stop_when_all_done=False,
        )
        assert w.rollout.offload_state() == {"model": False}  # on the device for the whole rollout
        w.rollout.offload()  # end of the rollout phase (runner.run)
        assert w.rollout.offload_state() == {"model": True}
        metrics = w.actor.update(flatten_for_update(batch, compute_advantages(batch, tc.algorithm)), 0)
        assert metrics["train/actor/num_samples"] == 16 and metrics["train/actor/grad_norm"] > 0
        assert w.actor.offload_state() == actor_off and w.rollout.offload_state() == {"model": True}
        w.actor.save_checkpoint(str(tmp_path / "ckpt"), {"epoch": 1})
        assert w.actor.offload_state() == actor_off
        values = w.rollout.values(w.env_eval.reset(seed=0))  # the next phase reloads the policy on demand
        assert values.shape == (2,) and w.rollout.offload_state() == {"model": False}


def test_offload_off_by_default(tmp_path: Path) -> None:
    from train_embodied.config import load_train_config
    from train_embodied.run_workers import RunWorkers

    tc = load_train_config("metaworld_ppo_tiny_cpu", [*RUN, f"runner.logger.log_dir={tmp_path}"])
    with RunWorkers(tc) as w:
        assert w.actor is not None
        w.rollout.load_weights(w.actor.state_dict(), 1)
        assert w.actor.offload_state() == {"model": False, "optimizer": False}
        assert w.rollout.offload_state() == {"model": False}


def test_run_with_offload_matches_run_without(tmp_path: Path) -> None:
    run_train("metaworld_ppo_tiny_cpu", RUN, tmp_path / "plain")
    run_train("metaworld_ppo_tiny_cpu", [*RUN, *OFFLOAD], tmp_path / "offload")
    rows = {name: read_metrics(tmp_path / name) for name in ("plain", "offload")}
    assert len(rows["plain"]) == len(rows["offload"]) >= 3  # 2 iterations + the after-RL evaluation
    for a, b in zip(rows["plain"], rows["offload"]):
        keys = {k for k in a if not k.startswith("time/")}
        assert keys == {k for k in b if not k.startswith("time/")}
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
    a = load_file(str(tmp_path / "plain" / "checkpoints" / "global_step_2" / "model.safetensors"))
    b = load_file(str(tmp_path / "offload" / "checkpoints" / "global_step_2" / "model.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
