"""NaN/inf guards on a real tiny OpenVLA-OFT update: a non-finite loss or gradient skips the optimizer step (the
weights and the optimizer state stay as they were) and is counted; non-finite update inputs are named; a run of
skipped updates ends the run with one message."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from train_embodied.batches import SampleBatch
from train_embodied.config.sections import AlgorithmSection, ModelSection, OptimSection
from train_embodied.numerics import (
    SKIPPED_MINIBATCHES,
    SkippedUpdates,
    TrainingDiverged,
    finite_optimizer_step,
    nonfinite_inputs,
)
from train_embodied.policy_io import build_optimizer, build_policy_for_run
from train_embodied.update import ppo_update

pytestmark = pytest.mark.usefixtures("one_thread")

N = 48


def _policy_and_batch() -> tuple[torch.nn.Module, SampleBatch]:
    torch.manual_seed(0)
    section = ModelSection(image_size=32, extra={"patch_size": 16, "hidden_size": 64})
    policy = build_policy_for_run(section, None)
    policy.eval()
    rng = np.random.default_rng(0)
    obs = {
        "images": rng.integers(0, 255, size=(N, 32, 32, 3), dtype=np.uint8),
        "states": rng.normal(size=(N, 4)).astype(np.float32),
        "task_descriptions": ["close the drawer"] * N,
    }
    with torch.no_grad():
        out = policy.predict(obs, mode="sample")
    return policy, SampleBatch(
        forward_inputs=out.forward_inputs,
        old_logprobs=out.logprobs,
        advantages=torch.randn(N, generator=torch.Generator().manual_seed(0)),
        mask=torch.ones(N, dtype=torch.bool),
        action_mask=torch.ones(N, 1, dtype=torch.bool),
        old_values=out.values,
        returns=torch.rand(N),
    )


def _params(policy: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy.named_parameters() if v.requires_grad}


def _run(policy, batch, opt) -> dict:
    metrics, _ = ppo_update(
        policy,
        opt,
        batch,
        AlgorithmSection(update_epoch=2),
        OptimSection(lr=1e-3, value_lr=1e-3),
        micro_batch_size=8,
        global_batch_size=16,
        generator=torch.Generator().manual_seed(0),
    )
    return metrics


def test_nonfinite_loss_skips_every_step_and_leaves_weights_and_optimizer_untouched() -> None:
    policy, batch = _policy_and_batch()
    opt = build_optimizer(policy, OptimSection(lr=1e-3, value_lr=1e-3))
    before = _params(policy)
    steps_before = {id(p): float(st["step"]) for p, st in opt.state.items() if "step" in st}
    batch.advantages = batch.advantages.clone()
    batch.advantages[:] = float("nan")  # reaches the loss of every minibatch
    metrics = _run(policy, batch, opt)
    assert metrics[SKIPPED_MINIBATCHES] == 1.0
    after = _params(policy)
    assert all(torch.equal(before[k], after[k]) for k in before)
    # no Adam step was taken from NaN gradients
    assert {id(p): float(st["step"]) for p, st in opt.state.items() if "step" in st} == steps_before
    assert all(p.grad is None for p in policy.parameters())


def test_one_bad_minibatch_is_skipped_and_the_others_train() -> None:
    policy, batch = _policy_and_batch()
    opt = build_optimizer(policy, OptimSection(lr=1e-3, value_lr=1e-3))
    batch.returns = batch.returns.clone()
    batch.returns[0] = float("inf")  # one sample: the minibatches holding it (one per pass) are skipped
    metrics = _run(policy, batch, opt)
    passes, per_pass = 2, N // 16
    assert metrics[SKIPPED_MINIBATCHES] == pytest.approx(passes / (passes * per_pass))
    weights = _params(policy)
    assert all(torch.isfinite(v).all() for v in weights.values())


def test_finite_step_checks_grad_norm_and_loss() -> None:
    param = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([param], lr=1.0)
    param.grad = torch.ones(2)
    metrics = {"train/loss": float("inf")}
    assert not finite_optimizer_step(opt, torch.tensor(1.0), metrics) and param.grad is None
    assert metrics[SKIPPED_MINIBATCHES] == 1.0 and torch.equal(param.data, torch.ones(2))
    param.grad = torch.ones(2)
    assert finite_optimizer_step(opt, torch.tensor(1.0), {"train/loss": 0.5})
    assert torch.equal(param.data, torch.zeros(2))


def test_nonfinite_inputs_are_named_and_masked_rows_ignored() -> None:
    adv = torch.tensor([0.0, float("nan"), 1.0, float("inf")])
    mask = torch.tensor([True, True, True, False])
    samples = SampleBatch(
        forward_inputs={},
        old_logprobs=torch.zeros(4, 1, 1),
        advantages=adv,
        mask=mask,
        returns=torch.zeros(4),
    )
    assert nonfinite_inputs(samples) == ["advantages (1 of 3)"]
    samples.mask = torch.ones(4, dtype=torch.bool)
    assert nonfinite_inputs(samples) == ["advantages (2 of 4)"]
    ok = SampleBatch(
        forward_inputs={},
        old_logprobs=torch.zeros(3, 1, 1),
        advantages=torch.zeros(3),
        mask=torch.ones(3, dtype=torch.bool),
    )
    assert nonfinite_inputs(ok) == []


def test_a_run_of_skipped_updates_ends_the_run_with_one_message(capsys) -> None:
    skips = SkippedUpdates(limit=3)
    skips.record(1, True, "NaN/inf in advantages (4 of 64)")
    skips.record(2, False, "")  # a good update resets the run
    skips.record(3, True, "x")
    skips.record(4, True, "x")
    with pytest.raises(TrainingDiverged) as info:
        skips.record(5, True, "NaN/inf loss or gradients in every minibatch")
    message = str(info.value)
    assert "\n" not in message and "3 updates in a row (iterations 3-5)" in message
    assert "runner.max_consecutive_skipped_updates=3" in message and skips.total == 4
    assert "iteration 1: update skipped: NaN/inf in advantages" in capsys.readouterr().out
