"""A reference-framework pi0 / pi0.5 PPO folder loads as the reference wrote it: its critic (ReLU MLP, hidden sizes
read from the tensors) and its flow_noise head (``noise_head.mlp_logvar.moduleList.*``, ``logvar_min/max``)
compute what the reference framework's own modules compute (the ``rlinf`` wheel), and bf16 keeps the parts the
reference keeps in float32."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import load_file, save_file

from vla_models import build_policy, load_policy
from vla_models.openpi import OpenPiConfig

ref_value_head = pytest.importorskip("rlinf.models.embodiment.modules.value_head")
ref_noise_net = pytest.importorskip("rlinf.models.embodiment.modules.explore_noise_net")


def _obs(b: int = 3, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "images": torch.randint(0, 256, (b, 64, 64, 3), generator=g, dtype=torch.uint8),
        "states": torch.randn(b, 4, generator=g),
        "task_descriptions": ["open the drawer", "close it", "push the button"][:b],
    }


def _reference_folder(tmp_path, heads: dict[str, torch.nn.Module], **fields) -> str:
    """A tiny pi0 / pi0.5 folder in openpi names whose heads are the reference framework's modules."""
    policy = build_policy(OpenPiConfig.tiny(**fields))
    folder = tmp_path / "ckpt"
    policy.save_pretrained(str(folder))
    sd = load_file(str(folder / "model.safetensors"))
    for prefix, module in heads.items():
        sd.update({f"{prefix}.{k}": v.detach().clone() for k, v in module.state_dict().items()})
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "manifest.json").unlink()  # the reference framework's folders carry none
    return str(folder)


@pytest.mark.parametrize("after_vlm", [False, True])
def test_reference_critic_loads_with_its_sizes_and_activation(tmp_path, after_vlm: bool) -> None:
    torch.manual_seed(0)
    sizes = OpenPiConfig.tiny().sizes
    width = sizes.width if after_vlm else sizes.expert_width
    ref = ref_value_head.ValueHead(
        input_dim=width, hidden_sizes=(96, 48, 24), output_dim=1, activation="relu", bias_last=True
    )
    folder = _reference_folder(tmp_path, {"value_head": ref}, pi05=after_vlm)
    policy = load_policy(folder, add_value_head=True)
    assert policy.config.value_head_hidden_sizes == (96, 48, 24)
    assert policy.config.value_head_activation == "relu"
    assert policy.config.critic_after_vlm is after_vlm
    feats = torch.randn(16, width) * 3
    with torch.no_grad():
        want = ref(feats)[:, 0]
        got = policy.value_head(feats)
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
    # GELU (the OpenVLA critic's activation) computes something else on the same weights
    assert not torch.allclose(torch.nn.functional.gelu(feats), torch.relu(feats), atol=1e-2)
    # the critic on the policy's own feature: the mean of the language model's output over the valid prefix
    if after_vlm:
        fi = policy.prepare_inputs(_obs())
        with torch.no_grad():
            prefix = policy.compute_prefix(fi)
            m = prefix.valid.unsqueeze(-1).float()
            feat = (prefix.out.float() * m).sum(1) / m.sum(1)
            assert torch.allclose(policy.values(_obs()), ref(feat)[:, 0], atol=1e-4)
    with pytest.raises(ValueError, match=r"value_head_hidden_sizes=\[64, 32\] contradicts .*=\[96, 48, 24\]"):
        load_policy(folder, add_value_head=True, value_head_hidden_sizes=[64, 32])


def test_reference_noise_head_loads_and_gives_the_same_log_variance(tmp_path) -> None:
    torch.manual_seed(1)
    sizes = OpenPiConfig.tiny().sizes
    ref = ref_noise_net.ExploreNoiseNet(
        in_dim=sizes.expert_width,
        out_dim=32,
        hidden_dims=[128, 64],
        activation_type="tanh",
        noise_logvar_range=[0.05, 0.3],
        noise_scheduler_type="learn",
    )
    with torch.no_grad():  # a trained head's spread: outputs across the whole range
        ref.mlp_logvar.moduleList[-1].linear_1.weight.mul_(30)
    folder = _reference_folder(tmp_path, {"noise_head": ref})
    policy = load_policy(folder, noise_method="flow_noise")
    lo, hi = policy.config.noise_logvar_range
    assert math.isclose(lo, 0.05, rel_tol=1e-6) and math.isclose(hi, 0.3, rel_tol=1e-6)
    h = torch.randn(4, 5, sizes.expert_width) * 2
    with torch.no_grad():
        want = ref(h)
        got = policy.noise_head(h)
    assert torch.allclose(2 * got.log(), 2 * want.log(), atol=1e-4)
    assert want.min() < 0.07 and want.max() > 0.2  # the folder's range, not the (0.08, 0.16) default
    # the noise the policy samples with is that std (temperature 1)
    out = policy.predict(_obs(2), generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(out.logprobs).all()
    with pytest.raises(ValueError, match=r"noise_logvar_range=\[0.08, 0.16\] contradicts"):
        load_policy(folder, noise_method="flow_noise", noise_logvar_range=[0.08, 0.16])


def test_joint_entropy_includes_the_initial_noise_term() -> None:
    """The reference framework's joint entropy is the mean over the K+1 terms: N(0, I)'s, then each step's
    learned std (``get_log_prob_value``)."""
    torch.manual_seed(2)
    policy = build_policy(OpenPiConfig.tiny(noise_method="flow_noise", joint_logprob=True))
    out = policy.predict(_obs(), generator=torch.Generator().manual_seed(3))
    fi = out.forward_inputs
    k = policy.config.num_steps
    with torch.no_grad():
        prefix = policy.compute_prefix(fi)
        terms = [torch.full_like(fi["chains"][:, 0], 0.5 * math.log(2 * math.pi * math.e))]
        for i in range(k):
            ks = torch.full((3,), i, dtype=torch.long)
            _, hidden = policy.expert_pass(prefix, None, fi["chains"][:, i], policy._times(ks), fi["states"])
            std = policy.noise_head(hidden)
            terms.append(0.5 * torch.log(2 * math.pi * math.e * std**2))
        c, a = policy.config.num_action_chunks, policy.config.action_dim
        want = torch.stack(terms, 1)[:, :, :c, :a].mean(dim=(1, 2, 3))
    assert torch.allclose(out.entropy.mean(dim=(1, 2)), want, atol=1e-5)


def test_bf16_keeps_projections_time_mlp_norms_and_heads_in_float32(tmp_path) -> None:
    for pi05 in (False, True):
        policy = build_policy(
            OpenPiConfig.tiny(pi05=pi05, precision="bf16", add_value_head=True, noise_method="flow_noise")
        )
        dtypes = {n: p.dtype for n, p in policy.named_parameters()}
        kept = ["action_in_proj.weight", "action_out_proj.weight", "value_head.mlp.0.weight"]
        kept += ["noise_head.mlp_logvar.moduleList.0.linear_1.weight"]
        kept += ["time_mlp_in.weight", "time_mlp_out.weight"] if pi05 else ["state_proj.weight"]
        kept += [] if pi05 else ["action_time_mlp_in.weight", "action_time_mlp_out.weight"]
        for name in kept:
            assert dtypes[name] == torch.float32, name
        assert (
            dtypes["paligemma_with_expert.gemma_expert.model.layers.0.mlp.up_proj.weight"] == torch.bfloat16
        )
        assert dtypes["paligemma_with_expert.paligemma.model.language_model.norm.weight"] == torch.float32
        assert policy.dtype == torch.bfloat16
        out = policy.predict(_obs(), generator=torch.Generator().manual_seed(0))
        logp, _ent, values = policy.evaluate(out.forward_inputs)
        assert torch.equal(logp, out.logprobs) and torch.equal(values, out.values)
    policy.save_pretrained(str(tmp_path / "bf16"))
    again = load_policy(str(tmp_path / "bf16"), add_value_head=True)
    assert again.action_in_proj.weight.dtype == torch.float32 and again.dtype == torch.bfloat16


def test_real_size_folder_sizes_and_critic_are_read_from_the_tensors() -> None:
    """A real-size pi0.5 LIBERO PPO state dict (built on the meta device): the sizes read from its tensors are
    PaliGemma 3B + the 300M expert, and its critic is the reference's 1024-512-256 on the language model."""
    from vla_models.openpi.checkpoint_keys import sizes_from_tensors, value_head_shape

    with torch.device("meta"):
        policy = build_policy(
            OpenPiConfig.pi0_base(config_name="pi05_libero", tokenizer="tiny", add_value_head=True)
        )
    sd = policy.state_dict()
    assert sizes_from_tensors(sd) == OpenPiConfig.pi0_base().sizes
    assert value_head_shape(sd) == (2048, (1024, 512, 256))
