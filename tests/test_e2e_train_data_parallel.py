"""Split-independent training: 2 env + 2 rollout + 2 actor Ray processes (127.0.0.1, gloo, FSDP2 in fp32) train
exactly what 1 of each trains, on real MetaWorld with the tiny OpenVLA-OFT, for PPO (GAE over whole env rows) and
GRPO (whole groups per actor rank).

What makes it so: start states are drawn for the whole batch and each rank takes its rows; each env row samples
from its own generator keyed by (seed, iteration, row); every actor rank computes the advantages of its whole env
rows (whitening and statistics over the whole rollout) and all ranks draw the same minibatches of the whole
rollout. Only float rounding differs (batched matmuls of other batch sizes, sums in another order): tolerance
rel 1e-4 on the logged losses and `WEIGHT_TOL` absolute on the weights after 2 iterations. After every weight
sync the rollout ranks hold the actor's weights bit for bit."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from safetensors.torch import load_file

from train_embodied.testing import GRPO_TINY, PPO_TINY, read_metrics, run_train

pytestmark = [pytest.mark.slow, pytest.mark.ray]
pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")
ray = pytest.importorskip("ray")

COMMON = [
    "runner.max_epochs=2",
    "runner.save_interval=-1",
    "runner.eval_before_train=false",
    "runner.eval_after_train=false",
    "algorithm.update_epoch=1",
    "actor.micro_batch_size=4",
]
# CPU cluster: resources are nodes; '0:0-1' = two processes on node 0, one env worker process per env rank
SPLIT = [
    "cluster.backend=ray",
    "cluster.component_placement={env: '0:0-1', rollout: '0:0-1', actor: '0:0-1'}",
    "hybrid_engines@actor.fsdp_config=fsdp",
    "actor.fsdp_config.mixed_precision.param_dtype=fp32",
]
RUNS = {
    # 4 envs x 6 decisions (MetaWorld episodes are longer: no episode ends, so no autoreset draw)
    "ppo": (
        "metaworld_ppo_tiny_cpu",
        [
            *PPO_TINY,
            "env.train.num_envs=4",
            "env.train.envs_per_worker=2",
            "env.train.max_steps_per_rollout_epoch=6",
            # one task: its mean is the rollout's, so the update is the plain one; the ranks still number the
            # task groups together (a collective) and centre over both ranks' rows
            "algorithm.per_task_advantages=center",
        ],
    ),
    # 4 envs in 2 groups of 2: one group per actor rank
    "grpo": ("metaworld_grpo_tiny_cpu", [*GRPO_TINY, "env.train.envs_per_worker=2"]),
}
COMPARED = ("train/actor/policy_loss", "train/actor/grad_norm", "train/loss", "rollout/advantages_max")


def _train_rows(log_dir: Path) -> dict[int, dict[str, float]]:
    return {r["step"]: r for r in read_metrics(log_dir) if "train/actor/policy_loss" in r}


@pytest.mark.parametrize("algo", sorted(RUNS))
def test_two_of_each_train_like_one_of_each(algo: str, tmp_path: Path, no_running_ray, monkeypatch) -> None:
    from weights_compare import WEIGHT_TOL, check_weights_at_every_sync

    config, overrides = RUNS[algo]
    synced = check_weights_at_every_sync(monkeypatch)
    summary = run_train(config, [*overrides, *COMMON, *SPLIT], tmp_path / "split")
    pids = summary["worker_pids"]
    assert [len(set(pids[g])) for g in ("env_train_0", "rollout", "actor")] == [2, 2, 2]
    assert synced == [1, 2]  # one sync per iteration, each checked on both rollout ranks
    assert not ray.is_initialized()
    run_train(config, [*overrides, *COMMON], tmp_path / "one")

    split, one = _train_rows(tmp_path / "split"), _train_rows(tmp_path / "one")
    assert sorted(split) == sorted(one) == [1, 2]
    for step in (1, 2):
        assert split[step]["train/actor/num_samples"] == one[step]["train/actor/num_samples"]
        assert math.isclose(split[step]["rollout/rewards"], one[step]["rollout/rewards"], rel_tol=1e-5)
        for key in COMPARED:
            assert math.isclose(split[step][key], one[step][key], rel_tol=1e-4, abs_tol=1e-6), (step, key)
        # the weights the rollout sampled with are the actor's: the first ratio is 1
        assert split[step]["train/actor/first_minibatch_approx_kl"] < 1e-6
    a = load_file(str(tmp_path / "split" / "checkpoints" / "global_step_2" / "model.safetensors"))
    b = load_file(str(tmp_path / "one" / "checkpoints" / "global_step_2" / "model.safetensors"))
    assert a.keys() == b.keys()
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < WEIGHT_TOL
