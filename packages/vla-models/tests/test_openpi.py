"""pi0 / pi0.5 (vla_models.openpi): parity with transformers' PI0, the flow log-probabilities against hand
computations, the policy contract (evaluate recomputes predict exactly), gradient routing and checkpoint layouts."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from vla_models import build_policy, config_from_dict, load_policy
from vla_models.openpi import OpenPiConfig, OpenPiPolicy
from vla_models.openpi.checkpoint_keys import to_openpi_names, to_transformers_pi0_names
from vla_models.openpi.flow_logprob import gaussian_logprob, sde_sigma, step_mean_std, timesteps
from vla_models.openpi.layers_openpi import AdaRMSNorm, gemma_config, siglip_config
from vla_models.openpi.processing_openpi import OpenPiNormalizer, discretize_state

B = 6


def _obs(b: int = B, seed: int = 0, state_dim: int = 4) -> dict:
    g = torch.Generator().manual_seed(seed)
    tasks = ["open the drawer", "close the drawer", "push the button"]
    return {
        "images": torch.randint(0, 256, (b, 64, 64, 3), generator=g, dtype=torch.uint8),
        "wrist_images": None,
        "states": torch.randn(b, state_dim, generator=g),
        "task_descriptions": [tasks[i % 3] for i in range(b)],
    }


def _policy(seed: int = 0, **kw) -> OpenPiPolicy:
    torch.manual_seed(seed)
    policy = build_policy(OpenPiConfig.tiny(**kw))
    # random (non-zero) adaptive norms and heads, so every path carries signal
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "dense" in name or "value_head" in name:
                p.normal_(0, 0.05)
    return policy.eval()


# ---- architecture -----------------------------------------------------------------------------------------
def test_velocity_matches_transformers_pi0() -> None:
    from transformers import PaliGemmaConfig, PI0Config, PI0ForConditionalGeneration

    policy = _policy(time_embedding_dtype="float32", max_token_len=16)
    cfg = policy.config
    g_vlm, g_dit = gemma_config(cfg, expert=False), gemma_config(cfg, expert=True)
    image_token = cfg.sizes.vocab_size - 1
    vlm = PaliGemmaConfig(
        text_config=g_vlm.to_dict(),
        vision_config=siglip_config(cfg).to_dict(),
        projection_dim=cfg.sizes.width,
        image_token_id=image_token,
    )
    hf_cfg = PI0Config(vlm_config=vlm, dit_config=g_dit.to_dict(), chunk_size=cfg.action_horizon)
    hf_cfg._attn_implementation = "sdpa"
    hf = PI0ForConditionalGeneration(hf_cfg).eval()
    missing, unexpected = hf.load_state_dict(to_transformers_pi0_names(policy.state_dict()), strict=False)
    assert missing == ["model.dit.embed_tokens.weight"] and unexpected == []

    obs = _obs()
    obs["task_descriptions"][1] = "pick and place the puck into the hole"  # different prompt lengths: padding
    fi = policy.prepare_inputs(obs)
    x = torch.randn(B, cfg.action_horizon, 32)
    t = torch.rand(B)
    with torch.no_grad():
        v_ours, _ = policy.expert_pass(policy.compute_prefix(fi), None, x, t, fi["states"])
        p = cfg.sizes.tokens_per_image
        ids = torch.cat([torch.full((B, p), image_token), fi["input_ids"]], dim=1)
        mask = torch.cat([torch.ones(B, p, dtype=torch.long), fi["text_mask"].long()], dim=1)
        px = fi["images"].permute(0, 1, 4, 2, 3).float() / 255 * 2 - 1
        v_hf = hf(
            state=policy._model_state(fi["states"]),
            noise=x,
            timestep=t,
            input_ids=ids,
            pixel_values=px,
            pixel_attention_mask=fi["image_mask"],
            attention_mask=mask,
        ).logits
    assert (v_ours - v_hf).abs().max() <= 1e-5


def test_adaptive_norm_equals_formula() -> None:
    torch.manual_seed(0)
    norm = AdaRMSNorm(16, 8)
    torch.nn.init.normal_(norm.dense.weight)
    x, cond = torch.randn(3, 5, 16), torch.randn(3, 8)
    out, gate = norm(x, cond)
    mod = cond @ norm.dense.weight.T + norm.dense.bias
    scale, shift, want_gate = mod[:, None, :16], mod[:, None, 16:32], mod[:, None, 32:]
    rms = x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(out, rms * (1 + scale) + shift, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gate, want_gate)
    torch.nn.init.zeros_(norm.dense.weight)  # a zero dense weight: plain RMSNorm shifted by the bias terms
    out, _ = norm(x, cond)
    torch.testing.assert_close(
        out, rms * (1 + norm.dense.bias[:16]) + norm.dense.bias[16:32], atol=1e-5, rtol=1e-5
    )


def test_real_size_builds_on_meta_device() -> None:
    with torch.device("meta"):
        policy = build_policy(
            config_from_dict({"model_type": "openpi", "size": "pi0_base", "tokenizer": "tiny"})
        )
    n = sum(p.numel() for p in policy.parameters())
    assert 3.0e9 < n < 3.6e9  # PaliGemma 3B + 300M expert
    assert "paligemma_with_expert.gemma_expert.model.layers.17.mlp.down_proj.weight" in policy.state_dict()


# ---- flow math --------------------------------------------------------------------------------------------
def _np_step(method, x, v, t, d, nl, ts, k, noise_std=None):
    x0, x1 = x - v * t, x + v * (1 - t)
    if method == "flow_ode":
        return x - d * v, 0.0
    if method == "flow_sde":
        tt = ts[k]
        denom = ts[1] if tt == 1 else tt
        sigma = nl * math.sqrt(tt / (1 - denom))
        return (1 - (t - d)) * x0 + (t - d - sigma**2 * d / (2 * t)) * x1, math.sqrt(d) * sigma
    if method == "flow_cps":
        return (1 - (t - d)) * x0 + (t - d) * math.cos(math.pi * nl / 2) * x1, (t - d) * math.sin(
            math.pi * nl / 2
        )
    return (1 - (t - d)) * x0 + (t - d) * x1, noise_std


@pytest.mark.parametrize("method", ["flow_ode", "flow_sde", "flow_cps", "flow_noise"])
@pytest.mark.parametrize("num_steps", [1, 4, 10])
def test_step_mean_std_equals_hand_computation(method: str, num_steps: int) -> None:
    rng = np.random.default_rng(num_steps)
    ts = timesteps(num_steps)
    assert torch.equal(ts, torch.cat([torch.linspace(1, 1 / num_steps, num_steps), torch.zeros(1)]))
    for k in range(num_steps):
        x, v = rng.normal(size=(1, 3, 2)), rng.normal(size=(1, 3, 2))
        nl, ns = 0.37, rng.uniform(0.08, 0.16, size=(1, 3, 2))
        t, d = float(ts[k]), float(ts[k] - ts[k + 1])
        kt = torch.tensor([k])
        mean, std = step_mean_std(
            method,
            torch.tensor(x, dtype=torch.float32),
            torch.tensor(v, dtype=torch.float32),
            ts[kt],
            ts[kt] - ts[kt + 1],
            sigma=sde_sigma(ts, kt, torch.tensor([nl])),
            noise_level=torch.tensor([nl]),
            noise_std=torch.tensor(ns, dtype=torch.float32),
        )
        want_mean, want_std = _np_step(method, x, v, t, d, nl, ts.tolist(), k, ns)
        np.testing.assert_allclose(mean.numpy(), want_mean, atol=2e-6)
        np.testing.assert_allclose(
            np.broadcast_to(std.numpy(), (1, 3, 2)), np.broadcast_to(want_std, (1, 3, 2)), atol=2e-6
        )
    if method == "flow_sde":
        assert float(sde_sigma(ts, torch.tensor([0]), torch.tensor([0.5]))) == pytest.approx(
            0.5 * math.sqrt(num_steps)
        )
    if method == "flow_cps":  # the last step ends at t = 0: deterministic
        _, std = step_mean_std(
            method,
            torch.zeros(1, 1, 1),
            torch.zeros(1, 1, 1),
            ts[-2:-1],
            ts[-2:-1],
            noise_level=torch.tensor([0.5]),
        )
        assert float(std) == 0.0


def test_gaussian_logprob_matches_torch_normal_and_is_zero_without_noise() -> None:
    x, m, s = torch.randn(4, 3), torch.randn(4, 3), torch.rand(4, 3) + 0.1
    torch.testing.assert_close(gaussian_logprob(x, m, s), torch.distributions.Normal(m, s).log_prob(x))
    assert torch.equal(gaussian_logprob(x, m, torch.zeros(())), torch.zeros(4, 3))


def test_predicted_logprob_equals_hand_density() -> None:
    policy = _policy(noise_method="flow_sde", noise_level=0.4, num_steps=4)
    obs = _obs()
    out = policy.predict(obs, generator=torch.Generator().manual_seed(3), temperature=1.5)
    fi = out.forward_inputs
    ts = timesteps(4).tolist()
    with torch.no_grad():
        prefix = policy.compute_prefix(fi)
        for b in range(B):
            k = int(fi["denoise_inds"][b])
            x, xn = fi["chains"][b, k].double().numpy(), fi["chains"][b, k + 1].double().numpy()
            v, _ = policy.expert_pass(
                prefix,
                torch.tensor([b]),
                fi["chains"][b : b + 1, k],
                torch.tensor([ts[k]]),
                fi["states"][b : b + 1],
            )
            mean, std = _np_step(
                "flow_sde", x, v[0].double().numpy(), ts[k], ts[k] - ts[k + 1], 0.4 * 1.5, ts, k
            )
            dens = -((xn - mean) ** 2) / (2 * std**2) - math.log(std) - 0.5 * math.log(2 * math.pi)
            np.testing.assert_allclose(out.logprobs[b].numpy(), dens[:5, :4], atol=5e-4, rtol=1e-5)
            # only the scored step is noisy: every other step is the Euler step exactly
            assert float(fi["noise_level"][b]) == pytest.approx(0.6)


# ---- the policy contract ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw",
    [
        dict(noise_method="flow_sde", add_value_head=True),
        dict(noise_method="flow_sde", add_value_head=True, joint_logprob=True, detach_critic_input=True),
        dict(noise_method="flow_cps", add_value_head=True, ignore_last=True),
        dict(noise_method="flow_noise", add_value_head=True, joint_logprob=True),
        dict(pi05=True, noise_method="flow_sde", add_value_head=True),
        dict(
            pi05=True,
            noise_method="flow_noise",
            add_value_head=True,
            value_after_vlm=False,
            chunk_critic_input=True,
        ),
    ],
    ids=[
        "pi0-sde",
        "pi0-sde-joint",
        "pi0-cps",
        "pi0-noise-joint",
        "pi05-sde-vlmcritic",
        "pi05-noise-expertcritic",
    ],
)
def test_evaluate_recomputes_predict_exactly(kw: dict) -> None:
    policy = _policy(**kw)
    out = policy.predict(_obs(), generator=torch.Generator().manual_seed(1))
    lp, ent, val = policy.evaluate(out.forward_inputs)
    assert torch.equal(lp, out.logprobs) and torch.equal(ent, out.entropy) and torch.equal(val, out.values)
    assert lp.shape == (B, 5, 4) and out.actions.shape == (B, 5, 4)
    assert (lp != 0).all() if not kw.get("ignore_last") else (lp != 0).any()
    # another batch composition (a permutation) agrees to float rounding
    perm = torch.randperm(B)
    lp2, _, val2 = policy.evaluate({k: v[perm] for k, v in out.forward_inputs.items()})
    torch.testing.assert_close(lp2, lp[perm], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(val2, val[perm], atol=1e-6, rtol=1e-5)
    # the stored noise level makes evaluate independent of the annealing step
    policy.set_global_step(10_000)
    assert torch.equal(policy.evaluate(out.forward_inputs)[0], lp)


def test_greedy_is_the_euler_loop_with_the_sampled_critic() -> None:
    policy = _policy(add_value_head=True)
    obs = _obs()
    greedy = policy.predict(obs, mode="greedy", generator=torch.Generator().manual_seed(5))
    sampled = policy.predict(obs, generator=torch.Generator().manual_seed(5))
    assert torch.equal(greedy.logprobs, torch.zeros(B, 5, 4))
    assert torch.equal(greedy.values, sampled.values)  # the same x_0: the same critic input
    fi = greedy.forward_inputs
    x = fi["chains"][:, 0]
    with torch.no_grad():
        prefix = policy.compute_prefix(fi)
        for i in range(4):
            v, _ = policy.expert_pass(prefix, None, x, torch.full((B,), 1 - i / 4), fi["states"])
            x = x - 0.25 * v
    torch.testing.assert_close(greedy.actions, x[:, :5, :4], atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="top_k"):
        policy.predict(obs, top_k=5)


def _grads(policy: OpenPiPolicy, loss: torch.Tensor) -> set[str]:
    policy.zero_grad(set_to_none=True)
    loss.backward()
    return {
        n.split(".")[0] if not n.startswith("paligemma") else ".".join(n.split(".")[:2])
        for n, p in policy.named_parameters()
        if p.grad is not None and p.grad.abs().sum() > 0
    }


def test_gradients_reach_only_what_is_trained() -> None:
    policy = _policy(add_value_head=True, train_expert_only=True, detach_critic_input=True)
    out = policy.predict(_obs(), generator=torch.Generator().manual_seed(2))
    assert _grads(policy, policy.evaluate(out.forward_inputs)[2].sum()) == {"value_head"}
    got = _grads(policy, policy.evaluate(out.forward_inputs)[0].sum())
    assert "paligemma_with_expert.paligemma" not in got and "paligemma_with_expert.gemma_expert" in got
    assert {"action_in_proj", "action_out_proj", "state_proj"} <= got and "value_head" not in got
    # flow_noise: the learned std gets gradients; with a shared critic input the value loss reaches the expert
    policy = _policy(add_value_head=True, noise_method="flow_noise", detach_critic_input=False)
    out = policy.predict(_obs(), generator=torch.Generator().manual_seed(2))
    assert "noise_head" in _grads(policy, policy.evaluate(out.forward_inputs)[0].sum())
    assert "paligemma_with_expert.gemma_expert" in _grads(
        policy, policy.evaluate(out.forward_inputs)[2].sum()
    )


@pytest.mark.parametrize("pi05,expert_only", [(False, False), (True, True)])
def test_lora_trains_adapters_and_heads_and_exports_merged(tmp_path, pi05: bool, expert_only: bool) -> None:
    """``is_lora``: adapters on the language model's and the expert's projections (the expert's alone with
    ``train_expert_only``); every base weight of PaliGemma and the expert is frozen; the fresh adapters leave
    the outputs unchanged; ``save_pretrained`` writes merged weights that reproduce the trained LoRA policy."""
    plain = _policy(pi05=pi05, add_value_head=True, train_expert_only=expert_only)
    plain.save_pretrained(str(tmp_path / "base"))
    lora = load_policy(str(tmp_path / "base"), is_lora=True, lora_rank=4).eval()
    obs = _obs()
    for a, b in zip(_outputs(plain, obs), _outputs(lora, obs), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    trainable = {n for n, p in lora.named_parameters() if p.requires_grad}
    body = {n for n in trainable if n.startswith("paligemma_with_expert.")}
    assert body and all(".lora_" in n for n in body)
    assert any(n.startswith("paligemma_with_expert.gemma_expert.") for n in body)
    assert any(n.startswith("paligemma_with_expert.paligemma.") for n in body) is not expert_only
    assert not any("vision_tower" in n or "embed_tokens" in n for n in trainable)
    assert {"action_in_proj.weight", "action_out_proj.weight", "value_head.mlp.0.weight"} & trainable
    # one optimiser step on the adapters moves the outputs; the merged export reproduces them
    opt = torch.optim.SGD([p for p in lora.parameters() if p.requires_grad], lr=0.5)
    out = lora.predict(obs, generator=torch.Generator().manual_seed(3))
    logp, _, values = lora.evaluate(out.forward_inputs)
    (-logp.mean() + values.pow(2).mean()).backward()
    opt.step()
    assert any(p.abs().sum() > 0 for n, p in lora.named_parameters() if "lora_B" in n)
    lora.save_pretrained(str(tmp_path / "merged"))
    saved = json.loads((tmp_path / "merged" / "config.json").read_text())["vla_models"]
    assert saved["is_lora"] is False
    loaded = load_policy(str(tmp_path / "merged")).eval()
    assert not any("lora_" in n for n in loaded.state_dict())
    for a, b in zip(_outputs(lora, obs), _outputs(loaded, obs), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    # loading the export with is_lora=True adds fresh adapters on top of the merged weights
    again = load_policy(str(tmp_path / "merged"), is_lora=True, lora_rank=4).eval()
    assert any("lora_A" in n for n, _ in again.named_parameters())
    for a, b in zip(_outputs(loaded, obs), _outputs(again, obs), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("pi05", [False, True])
def test_bf16_policy_reloads_every_tensor_bit_for_bit(tmp_path, pi05: bool) -> None:
    """With ``precision: bf16`` the projections, heads and norms stay float32: a trained value there (not a bf16
    number) comes back from ``save_pretrained`` / ``load_policy`` unrounded, in its own dtype."""
    policy = _policy(pi05=pi05, add_value_head=True, precision="bf16")
    kept = {n for n, p in policy.named_parameters() if p.dtype == torch.float32}
    assert {"action_in_proj.weight", "action_out_proj.weight", "value_head.mlp.0.weight"} <= kept
    with torch.no_grad():  # an update's step: float32 values that bf16 cannot hold
        for n, p in policy.named_parameters():
            if n in kept:
                p.add_(torch.full_like(p, 1e-6))
    policy.save_pretrained(str(tmp_path))
    loaded = load_policy(str(tmp_path))
    want, got = policy.state_dict(), loaded.state_dict()
    assert list(got) == list(want)
    for k, v in want.items():
        assert got[k].dtype == v.dtype, k
        assert torch.equal(got[k], v), k


def test_sft_loss_learns_a_fixed_mapping() -> None:
    policy = _policy(sft_loss_dims="env").train()
    obs = _obs(b=8)
    target = torch.tanh(obs["states"])[:, None, :].expand(-1, 5, -1).contiguous()

    def greedy_error() -> float:
        with torch.no_grad():
            out = policy.predict(obs, mode="greedy", generator=torch.Generator().manual_seed(0))
        return float((out.actions - target).abs().mean())

    before = greedy_error()
    opt = torch.optim.AdamW(policy.parameters(), lr=3e-3)
    torch.manual_seed(0)
    for _ in range(60):
        loss, metrics = policy.sft_loss(obs, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert set(metrics) == {"sft/loss", "sft/l1_normalized"}
    assert greedy_error() < 0.5 * before


# ---- processing -------------------------------------------------------------------------------------------
def test_normalizer_and_pi05_state_prompt() -> None:
    stats = {
        "mean": [1.0, -1.0, 0.5],
        "std": [2.0, 0.5, 1.0],
        "q01": [-1.0, 0.0, 0.0],
        "q99": [1.0, 2.0, 4.0],
    }
    x = torch.tensor([[3.0, 0.0, 9.0, 7.0]])  # 4 dims: the 4th has no statistics and passes through
    z = OpenPiNormalizer(stats, quantile=False)
    torch.testing.assert_close(
        z.normalize(x), torch.tensor([[2 / (2 + 1e-6), 1 / (0.5 + 1e-6), 8.5 / (1 + 1e-6), 7.0]])
    )
    q = OpenPiNormalizer(stats, quantile=True)
    torch.testing.assert_close(
        q.normalize(x)[0, :3], torch.tensor([8 / (2 + 1e-6) - 1, -1.0, 18 / (4 + 1e-6) - 1])
    )
    for n in (z, q):
        torch.testing.assert_close(n.unnormalize(n.normalize(x)), x)  # no clipping
    s = np.array([-1.0, -0.999, 0.0, 0.5, 0.999, 1.0])
    assert discretize_state(s).tolist() == (np.digitize(s, np.linspace(-1, 1, 257)[:-1]) - 1).tolist()
    policy = _policy(pi05=True)
    assert (
        policy.prompts.text("open_the drawer", np.array([0.0, 1.0]))
        == "Task: open the drawer, State: 128 255;\nAction: "
    )
    with pytest.raises(ValueError, match="exceeds max_token_len"):
        policy.prepare_inputs({**_obs(b=1), "task_descriptions": ["open the drawer " * 40]})


# ---- checkpoints ------------------------------------------------------------------------------------------
def _outputs(policy: OpenPiPolicy, obs: dict) -> tuple[torch.Tensor, ...]:
    out = policy.predict(obs, generator=torch.Generator().manual_seed(9))
    return out.actions, out.logprobs, out.values


def test_every_layout_loads_to_identical_outputs(tmp_path) -> None:
    stats = {"state": {"mean": [0.1] * 4, "std": [2.0] * 4}, "actions": {"mean": [0.0] * 4, "std": [0.5] * 4}}
    policy = _policy(add_value_head=True, norm_stats=stats, asset_id="lerobot/metaworld_mt50")
    obs = _obs()
    want = _outputs(policy, obs)
    policy.save_pretrained(str(tmp_path / "ours"))
    assert (tmp_path / "ours/assets/lerobot/metaworld_mt50/norm_stats.json").is_file()
    loaded = load_policy(str(tmp_path / "ours"))
    assert all(torch.equal(a, b) for a, b in zip(_outputs(loaded, obs), want))
    saved = json.loads((tmp_path / "ours/config.json").read_text())
    sd = policy.state_dict()
    layouts = {
        "openpi": {
            **to_openpi_names(sd),
            "paligemma_with_expert.gemma_expert.lm_head.weight": torch.zeros(3, 64),
        },
        "lerobot": {"model." + k: v for k, v in to_openpi_names(sd).items()},
        "transformers": {
            **to_transformers_pi0_names(sd),
            "model.dit.embed_tokens.weight": torch.zeros(3, 64),
            **{k: v for k, v in sd.items() if k.startswith("value_head.")},
        },
    }
    for name, tensors in layouts.items():
        folder = tmp_path / name
        folder.mkdir()
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"))
        (folder / "config.json").write_text(json.dumps(saved))
        (folder / "norm_stats.json").write_text(json.dumps({"norm_stats": stats}))
        (folder / "metadata.pt").write_bytes(b"not a pickle: never opened")
        got = _outputs(load_policy(str(folder)), obs)
        assert all(torch.equal(a, b) for a, b in zip(got, want)), name
    # the value head follows the config: dropped when not asked for, fresh (zero values) when asked for
    assert load_policy(str(tmp_path / "ours"), add_value_head=False).value_head is None
    # a missing tensor and a contradicted setting are named
    broken = tmp_path / "broken"
    broken.mkdir()
    tensors = {k: v for k, v in to_openpi_names(sd).items() if "layers.1.mlp.up_proj" not in k}
    save_file(tensors, str(broken / "model.safetensors"))
    (broken / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=r"missing \[.*layers\.1\.mlp\.up_proj"):
        load_policy(str(broken))
    with pytest.raises(ValueError, match="pi05=True contradicts"):
        load_policy(str(tmp_path / "ours"), pi05=True)


def test_pi05_checkpoint_with_plain_expert_norms_is_refused(tmp_path) -> None:
    pi0 = _policy()
    folder = tmp_path / "pi0"
    pi0.save_pretrained(str(folder))
    d = json.loads((folder / "config.json").read_text())
    d["vla_models"]["pi05"] = True
    tensors = to_openpi_names(pi0.state_dict())
    tensors["time_mlp_in.weight"] = torch.zeros(64, 64)
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(d))
    (folder / "manifest.json").unlink()  # a folder of other origin: no manifest of ours
    with pytest.raises(ValueError, match=r"input_layernorm\.weight.*adaptive expert norms"):
        load_policy(str(folder))


def test_config_from_dict_reads_the_reference_openpi_section() -> None:
    cfg = config_from_dict(
        {
            "model_type": "openpi",
            "size": "tiny",
            "action_dim": 4,
            "num_action_chunks": 5,
            "openpi": {"config_name": "pi05_metaworld", "noise_method": "flow_noise", "num_steps": 3},
        }
    )
    assert cfg.pi05 and cfg.action_horizon == 5 and not cfg.state_in_prompt and cfg.critic_after_vlm
    assert cfg.noise_method == "flow_noise" and cfg.num_steps == 3
    with pytest.raises(ValueError, match="noise_method='flow_magic' is not supported"):
        config_from_dict({"model_type": "openpi", "size": "tiny", "openpi": {"noise_method": "flow_magic"}})


def test_aloha_adapter_matches_openpi_reference_values_and_round_trips() -> None:
    from vla_models.openpi.processing_openpi import (
        aloha_actions_from_pi,
        aloha_actions_to_pi,
        aloha_gripper_to_angular,
    )

    # openpi aloha_policy: gripper 0.5 (normalised linear) -> asin((r^2 + p^2 - l^2) / (2 r p)) rescaled
    p = 0.5 * (0.05800 - 0.01844) + 0.01844
    want = (math.asin((0.022**2 + p**2 - 0.036**2) / (2 * 0.022 * p)) - 0.5476) / (1.6296 - 0.5476)
    assert float(aloha_gripper_to_angular(torch.tensor(0.5))) == pytest.approx(want, abs=1e-6)
    a = torch.randn(2, 3, 14)
    torch.testing.assert_close(aloha_actions_from_pi(aloha_actions_to_pi(a)), a, atol=1e-5, rtol=1e-5)
    assert torch.equal(aloha_actions_from_pi(a)[..., 1], -a[..., 1])  # a flipped joint
    policy = _policy(action_dim=14, adapt_to_pi=True, delta_action_mask=((True,) * 6 + (False,)) * 2)
    obs = {**_obs(state_dim=14), "states": torch.rand(B, 14) * 0.5 + 0.25}
    out = policy.predict(obs, mode="greedy", generator=torch.Generator().manual_seed(0))
    assert out.actions.shape == (B, 5, 14)
    # supervised targets map into the model space and back (delta on the joints, grippers absolute)
    fi = policy.prepare_inputs(obs)
    model = policy.model_actions(out.actions, fi["states"])
    torch.testing.assert_close(
        policy.actions_from_model(model, fi["states"]), out.actions, atol=1e-5, rtol=1e-5
    )


# ---- refused inputs -----------------------------------------------------------------------------------------
def test_saved_folder_has_a_manifest_and_a_flipped_byte_is_refused_naming_the_file(tmp_path) -> None:
    policy = _policy()
    policy.save_pretrained(str(tmp_path))
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert {"model.safetensors", "config.json"} <= set(manifest["files"])
    load_policy(str(tmp_path))  # the untouched folder loads
    weights = tmp_path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of one weight: still a readable file of finite values
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"model\.safetensors is altered: its sha256 differs") as err:
        load_policy(str(tmp_path))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            {"states": torch.full((B, 4), float("nan"))},
            r"obs\['states'\] holds NaN or inf \(rows \[0, 1, 2, 3, 4\]\)",
        ),
        ({"task_descriptions": ["open"] * (B - 1) + [7]}, r"row 5 is int \(7\)"),
        ({"task_descriptions": []}, "obs has 0 rows"),
    ],
    ids=["nan-states", "non-string-task", "zero-rows"],
)
def test_bad_observation_is_refused_in_one_line(bad: dict, message: str) -> None:
    policy = _policy()
    obs = {**_obs(), **bad}
    for call in (
        lambda: policy.predict(obs, mode="greedy"),
        lambda: policy.sft_loss(obs, torch.zeros(B, 5, 4)),
    ):
        with pytest.raises(ValueError, match=message) as err:
            call()
        assert "\n" not in str(err.value)
