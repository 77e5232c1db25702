"""`actor.enable_offload` / `rollout.enable_offload` / `env.enable_offload` end to end (local backend, real MetaWorld,
tiny OpenVLA-OFT): the workers are offloaded at the phase boundaries the runner has (the env workers' simulator
processes are gone between phases), and a run with offload trains bit-identically to one without (on the CPU a
model offload moves every tensor into fresh host storage and back; an env offload stops the simulator processes
and the next reset builds them again)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from safetensors.torch import load_file

from train_embodied.testing import PPO_TINY, read_metrics, run_train

pytestmark = pytest.mark.slow
pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")

RUN = [*PPO_TINY, "runner.max_epochs=2", "runner.eval_before_train=false", "runner.eval_greedy=false"]
OFFLOAD = ["actor.enable_offload=true", "rollout.enable_offload=true", "env.enable_offload=true"]


def _alive(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (a zombie holds no memory)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _simulators(group) -> list[int]:
    """The simulator process ids of every rank of an env worker group."""
    return [pid for rank in group.simulator_pids() for pid in rank]


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
        # the env workers stop their simulators once built (spec read): resident only inside a phase
        assert _simulators(w.env_train[0]) == [] and _simulators(w.env_eval) == []
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
        simulators = _simulators(w.env_train[0])
        assert len(simulators) == 1 and all(_alive(p) for p in simulators)  # 2 envs in one worker process
        w.rollout.offload()  # end of the rollout phase (runner.run)
        w.env_train[0].offload()
        assert w.rollout.offload_state() == {"model": True}
        assert _simulators(w.env_train[0]) == [] and not any(_alive(p) for p in simulators)
        metrics = w.actor.train(flatten_for_update(batch, compute_advantages(batch, tc.algorithm)), 0)
        assert metrics["train/actor/num_samples"] == 16 and metrics["train/actor/grad_norm"] > 0
        assert w.actor.offload_state() == actor_off and w.rollout.offload_state() == {"model": True}
        w.actor.save_checkpoint(str(tmp_path / "ckpt"), {"epoch": 1})
        assert w.actor.offload_state() == actor_off
        values = w.rollout.values(w.env_eval.reset(seed=0))  # the next phase reloads the policy on demand
        assert values.shape == (2,) and w.rollout.offload_state() == {"model": False}
        assert len(_simulators(w.env_eval)) == 1  # and its reset rebuilt the simulators


def test_offload_off_by_default(tmp_path: Path) -> None:
    from train_embodied.config import load_train_config
    from train_embodied.run_workers import RunWorkers

    tc = load_train_config("metaworld_ppo_tiny_cpu", [*RUN, f"runner.logger.log_dir={tmp_path}"])
    with RunWorkers(tc) as w:
        assert w.actor is not None
        w.rollout.load_weights(w.actor.state_dict(), 1)
        assert w.actor.offload_state() == {"model": False, "optimizer": False}
        assert w.rollout.offload_state() == {"model": False}
        simulators = _simulators(w.env_train[0])
        w.env_train[0].offload()  # a no-op without env.enable_offload
        assert _simulators(w.env_train[0]) == simulators and all(_alive(p) for p in simulators)


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
