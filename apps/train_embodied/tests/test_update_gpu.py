"""The actor update with the policy on a GPU and the rollout batch in host memory (as the runner sends it)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from train_embodied.batches import SampleBatch
from train_embodied.config.sections import AlgorithmSection, ModelSection, OptimSection
from train_embodied.policy_io import build_optimizer, build_policy_for_run, frozen_copy
from train_embodied.update import ppo_update

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

N = 16


def _cpu(x):
    return {k: _cpu(v) for k, v in x.items()} if isinstance(x, dict) else x.cpu()


@pytest.mark.parametrize(
    "train_policy, kl_beta", [(True, 0.0), (False, 0.0), (True, 0.5)], ids=["policy", "critic-only", "kl"]
)
def test_update_on_gpu_with_a_host_batch(train_policy: bool, kl_beta: float) -> None:
    torch.manual_seed(0)
    section = ModelSection(image_size=32, extra={"patch_size": 16, "hidden_size": 64})
    policy = build_policy_for_run(section, None, device=torch.device("cuda"))
    policy.eval()
    rng = np.random.default_rng(0)
    obs = {
        "images": rng.integers(0, 255, size=(N, 32, 32, 3), dtype=np.uint8),
        "states": rng.normal(size=(N, 4)).astype(np.float32),
        "task_descriptions": ["close the drawer"] * N,
    }
    with torch.no_grad():
        out = policy.predict(obs, mode="sample")
    batch = SampleBatch(
        forward_inputs=_cpu(out.forward_inputs),
        old_logprobs=out.logprobs.cpu(),
        advantages=torch.randn(N),
        mask=torch.ones(N, dtype=torch.bool),
        action_mask=torch.ones(N, 1, dtype=torch.bool),
        sample_weight=torch.linspace(0.5, 1.5, N),
        old_values=out.values.cpu(),
        returns=torch.rand(N),
    )
    optim = OptimSection(lr=1e-3, value_lr=1e-3)
    reference = frozen_copy(policy) if kl_beta > 0 else None  # on the GPU with the policy
    metrics, steps = ppo_update(
        policy,
        build_optimizer(policy, optim),
        batch,
        AlgorithmSection(update_epoch=1, kl_beta=kl_beta),
        optim,
        micro_batch_size=4,
        global_batch_size=8,
        generator=torch.Generator().manual_seed(0),
        train_policy=train_policy,
        reference=reference,
    )
    assert steps == 2 and np.isfinite(metrics["train/loss"])
    assert metrics["train/actor/first_minibatch_approx_kl"] < 1e-3
    if kl_beta > 0:  # the second minibatch's policy has moved off the reference
        assert 0 < metrics["train/actor/kl_loss"] < 1
