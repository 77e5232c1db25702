"""Sharded actor end to end: `cluster.component_placement` puts the actor on two Ray processes, which train the
tiny OpenVLA-OFT with FSDP2 over gloo on real MetaWorld, as one process would; the sharded run's saved policy and
checkpoints load back (resume continues exactly, here with offload on)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from weights_compare import WEIGHT_TOL

from train_embodied.testing import PPO_TINY, read_metrics, run_train

pytestmark = [pytest.mark.slow, pytest.mark.ray]
pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")
ray = pytest.importorskip("ray")

RUN = [
    *PPO_TINY,
    "runner.max_epochs=2",
    "runner.save_interval=1",
    "runner.eval_before_train=false",
    "runner.eval_after_train=false",
    # 16 samples in minibatches of 5, 5, 5, 1: rank shares of 3 and 2 (and 1 and 0), so rank 1 pads with weight-0
    # passes to keep step with rank 0's FSDP collectives
    "actor.micro_batch_size=1",
    "actor.global_batch_size=5",
    # the KL penalty's frozen reference is sharded like the policy; a resumed run rebuilds it from the start
    "algorithm.kl_beta=0.1",
]
# CPU cluster: resources are nodes; '0:0-1' = two actor processes on node 0. fp32 so it can match one process.
SHARDED = [
    "cluster.backend=ray",
    "cluster.component_placement={env: 0, rollout: 0, actor: '0:0-1'}",
    "hybrid_engines@actor.fsdp_config=fsdp",
    "actor.fsdp_config.mixed_precision.param_dtype=fp32",
]
COMPARED = (
    "train/actor/policy_loss",
    "train/actor/kl_loss",
    "train/critic/value_loss",
    "train/actor/grad_norm",
    "train/loss",
)


def _train_rows(log_dir: Path) -> dict[int, dict[str, float]]:
    return {r["step"]: r for r in read_metrics(log_dir) if "train/actor/policy_loss" in r}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two iterations with the actor sharded over 2 Ray processes, and one iteration with one local process."""
    if ray.is_initialized():
        ray.shutdown()
    root = tmp_path_factory.mktemp("fsdp")
    run_train("metaworld_ppo_tiny_cpu", [*RUN, *SHARDED], root / "sharded")
    assert not ray.is_initialized()
    run_train("metaworld_ppo_tiny_cpu", [*RUN, "runner.max_epochs=1"], root / "single")
    return {"sharded": root / "sharded", "single": root / "single"}


def test_two_actor_ranks_train_like_one_process(runs: dict[str, Path]) -> None:
    summary = json.loads((runs["sharded"] / "summary.json").read_text())
    actor_pids = summary["worker_pids"]["actor"]
    assert len(actor_pids) == 2 and len(set(actor_pids)) == 2 and os.getpid() not in actor_pids
    sharded, single = _train_rows(runs["sharded"]), _train_rows(runs["single"])
    assert sorted(sharded) == [1, 2] and sorted(single) == [1]
    # the gathered weights reach the rollout: the actor recomputes exactly the sampled log-probs
    assert sharded[1]["train/actor/first_minibatch_approx_kl"] < 1e-6
    assert sharded[2]["train/actor/first_minibatch_approx_kl"] < 1e-6
    # iteration 1 samples with the same initial weights, so both runs see the same rollout (each actor rank
    # averages its own env rows; the ranks' means are joined, so only float rounding differs) ...
    assert math.isclose(sharded[1]["rollout/rewards"], single[1]["rollout/rewards"], rel_tol=1e-6)
    assert sharded[1]["train/actor/num_samples"] == single[1]["train/actor/num_samples"] == 16
    # ... and half a minibatch per rank, averaged by FSDP, gives the full-minibatch loss and gradient
    for key in COMPARED:
        assert math.isclose(sharded[1][key], single[1][key], rel_tol=1e-5, abs_tol=1e-7), key
    # the weights after iteration 1 agree too (rank 0 wrote the full, unsharded tensors)
    a = load_file(str(runs["sharded"] / "checkpoints" / "global_step_1" / "model.safetensors"))
    b = load_file(str(runs["single"] / "checkpoints" / "global_step_1" / "model.safetensors"))
    assert a.keys() == b.keys()
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < WEIGHT_TOL
    manifest = json.loads((runs["sharded"] / "checkpoints" / "global_step_1" / "manifest.json").read_text())
    assert manifest["world_size"] == 2


def test_sharded_policy_loads_and_resume_continues(runs: dict[str, Path], tmp_path: Path) -> None:
    from train_embodied.config import load_train_config
    from train_embodied.policy_io import build_policy_for_run

    final = load_file(str(runs["sharded"] / "checkpoints" / "global_step_2" / "model.safetensors"))
    tc = load_train_config(
        "metaworld_ppo_tiny_cpu", [*PPO_TINY, f"actor.model.model_path={runs['sharded'] / 'policy'}"]
    )
    loaded = build_policy_for_run(tc.actor.model, {"action_dim": 4}).state_dict()
    assert loaded.keys() == final.keys()
    # the OpenVLA layout folds DINOv2's first position embedding into its CLS token (vla_models checkpoint_keys)
    emb = "backbone.vision_backbone.featurizer.embeddings."
    cls, pos = f"{emb}cls_token", f"{emb}position_embeddings"
    torch.testing.assert_close(loaded[cls] + loaded[pos][:, :1], final[cls] + final[pos][:, :1])
    assert (loaded[pos][:, 1:] == final[pos][:, 1:]).all()
    assert all((loaded[k] == final[k]).all() for k in final if k not in (cls, pos))

    # resume the sharded run from its iteration-1 checkpoint (sharded again, offload on): iteration 2 is replayed
    resumed = tmp_path / "resumed"
    run_train(
        "metaworld_ppo_tiny_cpu",
        [
            *RUN,
            *SHARDED,
            f"runner.resume_dir={runs['sharded'] / 'checkpoints' / 'global_step_1'}",
            "actor.enable_offload=true",
            "rollout.enable_offload=true",
        ],
        resumed,
    )
    again, full = _train_rows(resumed), _train_rows(runs["sharded"])
    assert sorted(again) == [2]
    for key in (*COMPARED, "rollout/rewards"):
        assert again[2][key] == full[2][key], key
    weights = load_file(str(resumed / "checkpoints" / "global_step_2" / "model.safetensors"))
    start = load_file(str(runs["sharded"] / "checkpoints" / "global_step_1" / "model.safetensors"))
    assert any(not (start[k] == final[k]).all() for k in final), "iteration 2 changed nothing"
    assert all((weights[k] == final[k]).all() for k in final)
