"""Actor -> rollout weight sync worker to worker on the Ray backend: the actor's rank 0 broadcasts to two rollout
processes over their own gloo group on 127.0.0.1; the driver only names the version. Real Ray, real MetaWorld
env workers, the tiny OpenVLA-OFT with LoRA (after the first full sync only the trainable tensors travel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from train_embodied.testing import PPO_TINY

pytestmark = [pytest.mark.slow, pytest.mark.ray]
pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")
ray = pytest.importorskip("ray")


def test_rollout_ranks_hold_the_actors_weights_bit_for_bit_and_refuse_stale(tmp_path: Path) -> None:
    from weights_compare import state_dicts_equal

    from train_embodied.config import load_train_config
    from train_embodied.run_workers import RunWorkers
    from vla_infra.weight_sync import StaleWeightsError

    if ray.is_initialized():
        ray.shutdown()
    tc = load_train_config(
        "metaworld_ppo_tiny_cpu",
        [
            *PPO_TINY,
            "cluster.backend=ray",
            "cluster.component_placement={env: 0, rollout: '0:0-1', actor: 0}",
            "actor.model.is_lora=true",
            f"runner.logger.log_dir={tmp_path}",
        ],
    )
    with RunWorkers(tc) as w:
        assert w.actor is not None and w.rollout.world_size == 2
        actor = w.actor.state_dict()
        # the rollout ranks built their own random initial weights: not the actor's yet
        assert not state_dicts_equal(actor, w.rollout.execute_rank(0, "state_dict"))
        first = w.weights.sync(1)
        assert first is not None and first["tensors"] == len(actor)
        for rank in range(2):
            assert w.rollout.execute_rank(rank, "weight_version") == 1
            assert state_dicts_equal(actor, w.rollout.execute_rank(rank, "state_dict")), rank
        obs = w.env_train[0].reset(seed=0)
        out = w.rollout.predict(obs, mode="sample", weight_version=1)
        assert out.actions.shape[0] == 2  # one row per rollout rank
        with pytest.raises(StaleWeightsError, match="holds weight version 1 but the run is at version 2"):
            w.rollout.predict(obs, mode="sample", weight_version=2)
        # a later version reaches both ranks; an old one is refused before anything is sent
        second = w.weights.sync(2)
        assert second is not None and 0 < second["tensors"] < first["tensors"]  # the trainable tensors only
        assert second["bytes"] < first["bytes"] / 4
        assert [w.rollout.execute_rank(r, "weight_version") for r in range(2)] == [2, 2]
        assert all(state_dicts_equal(actor, w.rollout.execute_rank(r, "state_dict")) for r in range(2))
        with pytest.raises(StaleWeightsError, match="not newer"):
            w.weights.sync(2)
        # the peer group rebuilt (what a replaced rollout process needs), then a full sync reaches every rank
        w.weights.connect()
        assert w.weights.sync(3) == first
        assert all(state_dicts_equal(actor, w.rollout.execute_rank(r, "state_dict")) for r in range(2))
    assert not ray.is_initialized()
