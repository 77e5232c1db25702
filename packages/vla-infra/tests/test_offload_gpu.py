"""Offload on a CUDA device frees its memory and restores the tensors bit-identically (skips without CUDA)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import tiny_transformer_jobs as helpers

from vla_infra.offload import offload_module, offload_optimizer, reload_module, reload_optimizer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_offload_frees_device_memory_and_reload_restores_bits() -> None:
    torch.manual_seed(0)
    model = helpers.TinyTransformer(dim=512, layers=4).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = helpers.make_batches(1, 8)[0].cuda()
    helpers.lm_loss(model, ids).backward()
    opt.step()
    helpers.lm_loss(model, ids).backward()
    before = {n: (p.detach().clone(), p.grad.clone()) for n, p in model.named_parameters()}
    moments = [opt.state[p]["exp_avg"].clone() for p in model.parameters()]
    torch.cuda.synchronize()
    used = torch.cuda.memory_allocated()

    offload_module(model)
    offload_optimizer(opt)
    freed = used - torch.cuda.memory_allocated()
    # params + grads + two Adam moments ~ 4x the parameter bytes left the device.
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert freed >= 0.9 * 4 * param_bytes
    assert all(p.device.type == "cpu" and p.is_pinned() for p in model.parameters())

    reload_module(model)
    reload_optimizer(opt)
    for n, p in model.named_parameters():
        assert p.device.type == "cuda"
        assert torch.equal(p, before[n][0]) and torch.equal(p.grad, before[n][1]), n
    for p, m in zip(model.parameters(), moments):
        assert torch.equal(opt.state[p]["exp_avg"], m)
        assert opt.state[p]["step"].device.type == "cpu"  # non-capturable Adam keeps `step` on the CPU
