"""``cpu_float32_products``: half-precision Linear layers computing their CPU products in float32."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from vla_models import OpenPiConfig, OpenVLAConfig, build_policy, cpu_float32_products, stats_from_bounds
from vla_models.cpu_products import Float32ProductLinear, native_half_products

STATS = stats_from_bounds([-1.0] * 4, [1.0] * 4, key="mw")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 40])
def test_linear_forward_and_backward_are_the_float32_products(dtype: torch.dtype, rows: int) -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(24, 10).to(dtype)
    assert cpu_float32_products(layer, only_without_native=False) == 1
    assert type(layer) is Float32ProductLinear
    x = torch.randn(2, rows, 24).to(dtype).requires_grad_()
    y = layer(x)
    assert y.dtype == dtype
    w, b = layer.weight, layer.bias
    xf = x.detach().float().requires_grad_()
    wf = w.detach().float().requires_grad_()
    bf = b.detach().float().requires_grad_()
    yf = F.linear(xf, wf, bf)
    torch.testing.assert_close(y, yf.to(dtype), atol=0, rtol=0)  # the same float32 product, rounded once
    g = torch.randn_like(yf)
    y.backward(g.to(dtype))
    yf.backward(g.to(dtype).float())
    for half, full in ((x, xf), (w, wf), (b, bf)):
        assert half.grad.dtype == dtype
        torch.testing.assert_close(half.grad, full.grad.to(dtype), atol=0, rtol=0)


def test_few_rows_without_gradient_keep_the_native_kernel() -> None:
    layer = torch.nn.Linear(32, 8).to(torch.bfloat16)
    native = copy.deepcopy(layer)
    cpu_float32_products(layer, only_without_native=False)
    x = torch.randn(3, 32).to(torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(layer(x), native(x))  # 3 rows: the native bf16 product, bit for bit
    x = torch.randn(64, 32).to(torch.bfloat16)
    with torch.no_grad():
        expect = F.linear(x.float(), layer.weight.float(), layer.bias.float()).bfloat16()
        assert torch.equal(layer(x), expect)


def test_float32_weights_and_other_layers_are_left_alone() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Conv2d(1, 1, 1))
    assert cpu_float32_products(model, only_without_native=False) == 0
    assert type(model[0]) is torch.nn.Linear


def test_switching_follows_the_cpu_s_native_support() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)).to(torch.bfloat16)
    switched = cpu_float32_products(model)
    assert switched == (0 if native_half_products(torch.bfloat16) else 2)


CONFIGS = {
    "openvla": lambda: OpenVLAConfig.tiny(
        action_dim=4, num_action_chunks=2, norm_stats=STATS, precision="bf16", is_lora=True, lora_rank=4
    ),
    "pi0": lambda: OpenPiConfig.tiny(
        action_dim=4,
        num_action_chunks=2,
        num_steps=2,
        norm_stats=STATS,
        precision="bf16",
        is_lora=True,
        lora_rank=4,
        noise_method="flow_sde",
        noise_level=0.5,
    ),
}


@pytest.mark.parametrize("family", list(CONFIGS))
def test_bf16_policy_decides_and_trains_as_with_native_products(family: str, make_obs_fn) -> None:
    """The switched policy keeps its state-dict keys, re-evaluates its own decision, and its greedy decision,
    log-probs and LoRA gradients agree with the native bf16 policy's to bf16 rounding."""
    torch.manual_seed(0)
    native = build_policy(CONFIGS[family]()).eval()
    switched = copy.deepcopy(native)
    n = cpu_float32_products(switched, only_without_native=False)
    assert n > 0
    assert list(switched.state_dict()) == list(native.state_dict())
    obs = make_obs_fn(2)
    gen = lambda: [torch.Generator().manual_seed(i) for i in range(2)]  # noqa: E731
    with torch.no_grad():
        a = native.predict(obs, mode="greedy", generator=gen())
        b = switched.predict(obs, mode="greedy", generator=gen())
        sampled = switched.predict(obs, mode="sample", generator=gen())
    torch.testing.assert_close(b.actions, a.actions, atol=0.05, rtol=0.05)
    logp, _, _ = switched.evaluate(sampled.forward_inputs)
    torch.testing.assert_close(logp, sampled.logprobs, atol=0.05, rtol=0.05)
    logp_native, _, _ = native.evaluate(sampled.forward_inputs)
    logp.sum().backward()
    logp_native.sum().backward()
    grads = [
        (p.grad, q.grad)
        for (name, p), (_, q) in zip(switched.named_parameters(), native.named_parameters())
        if "lora_B" in name and p.grad is not None
    ]
    assert grads, "no LoRA gradient"
    for g, h in grads:
        assert g.dtype == h.dtype
        torch.testing.assert_close(g.float(), h.float(), atol=0.05 * float(h.abs().max()) + 1e-3, rtol=0.1)
