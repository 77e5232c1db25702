"""CUDA checks of both families (bf16): exact predict/evaluate agreement through the fused kernel path."""

from __future__ import annotations

import pytest
import torch

from vla_models import OpenVLAConfig, OpenVLAOFTConfig, build_policy

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.parametrize("family", ["openvla", "openvla_oft"])
def test_predict_equals_evaluate_on_cuda_bf16(family: str, make_obs_fn) -> None:
    kw = dict(action_dim=7, num_action_chunks=2, add_value_head=True, precision="bf16")
    cfg = OpenVLAConfig.tiny(**kw) if family == "openvla" else OpenVLAOFTConfig.tiny(**kw)
    policy = build_policy(cfg).cuda()
    out = policy.predict(make_obs_fn(8), temperature=1.6)
    assert out.actions.device.type == "cuda"
    logp, ent, values = policy.evaluate(out.forward_inputs)
    assert torch.equal(logp, out.logprobs) and torch.equal(ent, out.entropy)
    assert torch.equal(values, out.values)
    logp.mean().backward()
    assert policy.backbone.language_model.lm_head.weight.grad is not None


def test_kernel_path_matches_torch_reference_on_cuda() -> None:
    from vla_models.action_logprobs import action_logits, action_logprobs_and_entropy

    hidden = torch.randn(4, 14, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    offsets = torch.randint(0, 256, (4, 14), device="cuda")
    t = torch.full((4,), 1.3, device="cuda")
    k = torch.zeros(4, dtype=torch.long, device="cuda")
    logp, ent = action_logprobs_and_entropy(
        hidden, weight, offsets, temperature=t, top_k=k
    )  # Triton (uniform t)
    ref = torch.log_softmax(action_logits(hidden, weight, temperature=t, top_k=k), -1)
    torch.testing.assert_close(logp, ref.gather(-1, offsets[..., None])[..., 0], atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(ent, -(ref.exp() * ref).sum(-1), atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize(
    "pi05,noise_method", [(False, "flow_sde"), (False, "flow_noise"), (True, "flow_sde"), (True, "flow_cps")]
)
def test_openpi_predict_equals_evaluate_on_cuda_bf16(pi05: bool, noise_method: str, make_obs_fn) -> None:
    from vla_models import OpenPiConfig

    cfg = OpenPiConfig.tiny(
        pi05=pi05, noise_method=noise_method, add_value_head=True, precision="bf16", action_dim=7
    )
    policy = build_policy(cfg).cuda()
    out = policy.predict(make_obs_fn(8), temperature=1.3)
    assert out.actions.device.type == "cuda" and torch.isfinite(out.actions).all()
    logp, ent, values = policy.evaluate(out.forward_inputs)
    assert torch.equal(logp, out.logprobs) and torch.equal(ent, out.entropy)
    assert torch.equal(values, out.values)
    (logp.mean() + values.mean()).backward()
    assert policy.value_head is not None
    grads = [p.grad for p in policy.value_head.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
