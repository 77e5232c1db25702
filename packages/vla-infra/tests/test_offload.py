"""Offload / reload of params, grads, buffers and optimizer state; env offload protocol."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import tiny_transformer_jobs as helpers

from vla_infra.offload import (
    ModelOffloader,
    OffloadableEnv,
    is_offloaded,
    offload_env,
    offload_module,
    offload_optimizer,
    reload_env,
    reload_module,
    reload_optimizer,
)


def _trained() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A model after one AdamW step, with fresh grads of a second backward (so grads are non-zero)."""
    torch.manual_seed(0)
    model = helpers.TinyTransformer()
    model.register_buffer("counter", torch.arange(5, dtype=torch.int64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batches = helpers.make_batches(2, 4)
    helpers.lm_loss(model, batches[0]).backward()
    opt.step()
    opt.zero_grad()
    helpers.lm_loss(model, batches[1]).backward()
    return model, opt


def _snapshot(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    snap = {f"p:{n}": p.detach().clone() for n, p in model.named_parameters()}
    snap.update({f"g:{n}": p.grad.clone() for n, p in model.named_parameters()})
    snap.update({f"b:{n}": b.clone() for n, b in model.named_buffers()})
    for i, p in enumerate(model.parameters()):
        snap.update({f"o:{i}:{k}": v.clone() for k, v in opt.state[p].items()})
    return snap


def test_offload_reload_is_bit_identical_after_a_train_step() -> None:
    model, opt = _trained()
    before = _snapshot(model, opt)
    ptrs = {n: p.data_ptr() for n, p in model.named_parameters()}
    param_ids = [id(p) for p in model.parameters()]
    offload_module(model)
    offload_optimizer(opt)
    assert is_offloaded(model) and is_offloaded(opt)
    # The tensors really moved into new storage (host copies), the parameter objects did not change.
    assert all(p.data_ptr() != ptrs[n] for n, p in model.named_parameters())
    assert [id(p) for p in model.parameters()] == param_ids
    reload_module(model)
    reload_optimizer(opt)
    assert not is_offloaded(model) and not is_offloaded(opt)
    after = _snapshot(model, opt)
    assert before.keys() == after.keys()
    for key in before:
        assert before[key].dtype == after[key].dtype and before[key].device == after[key].device, key
        assert torch.equal(before[key], after[key]), key
    # The optimizer still drives the same parameters: one more step equals a never-offloaded twin's step.
    twin, twin_opt = _trained()
    opt.step()
    twin_opt.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a, b)


def test_offload_twice_or_reload_without_offload_fails() -> None:
    model, opt = _trained()
    with pytest.raises(RuntimeError, match="not offloaded"):
        reload_module(model)
    with pytest.raises(RuntimeError, match="not offloaded"):
        reload_optimizer(opt)
    offload_module(model)
    with pytest.raises(RuntimeError, match="already offloaded"):
        offload_module(model)
    reload_module(model)


def test_tied_weights_stay_tied() -> None:
    model = helpers.TinyTransformer(vocab=helpers.DIM)
    model.head.weight = model.embed.weight
    offload_module(model)
    reload_module(model)
    assert model.head.weight is model.embed.weight


class _SuspendableSim:
    """A stand-in simulator whose state is snapshotted on offload and restored on onload."""

    def __init__(self) -> None:
        self.state: list[int] | None = [1, 2, 3]
        self.saved: list[int] | None = None
        self.calls: list[str] = []

    def offload(self) -> None:
        self.saved, self.state = self.state, None
        self.calls.append("offload")

    def onload(self) -> None:
        self.state, self.saved = self.saved, None
        self.calls.append("onload")


def test_env_protocol_and_model_offloader() -> None:
    sim = _SuspendableSim()
    assert isinstance(sim, OffloadableEnv)
    assert not offload_env(object()) and not reload_env(object())  # envs without the hooks: no-op
    model, opt = _trained()
    before = _snapshot(model, opt)
    actor = ModelOffloader(model, opt)
    disabled = ModelOffloader(helpers.TinyTransformer(), enabled=False)
    actor.offload()
    disabled.offload()
    assert offload_env(sim)
    assert actor.offloaded and sim.state is None and not disabled.offloaded
    assert reload_env(sim)
    disabled.reload()
    actor.reload()
    assert not actor.offloaded and sim.state == [1, 2, 3] and sim.calls == ["offload", "onload"]
    after = _snapshot(model, opt)
    assert all(torch.equal(before[k], after[k]) for k in before)
