"""predict / evaluate / sft_loss contract for both families, fp32 and bf16."""

from __future__ import annotations

import pytest
import torch

from vla_models import OpenVLAConfig, OpenVLAOFTConfig, build_policy, stats_from_bounds

LOW, HIGH = [-2.0, -1.0, 0.0, 10.0], [2.0, 1.0, 0.5, 20.0]


def _cfg(family: str, **kw):
    kw.setdefault("add_value_head", True)
    stats = stats_from_bounds(LOW, HIGH, key="mw")
    if family == "openvla":
        return OpenVLAConfig.tiny(action_dim=4, num_action_chunks=2, norm_stats=stats, **kw)
    kw.setdefault("use_proprio", True)
    return OpenVLAOFTConfig.tiny(action_dim=4, num_action_chunks=2, proprio_dim=4, norm_stats=stats, **kw)


@pytest.mark.parametrize("family", ["openvla", "openvla_oft"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_predict_logprobs_equal_evaluate(family: str, precision: str, make_obs_fn) -> None:
    policy = build_policy(_cfg(family, precision=precision))
    obs = make_obs_fn(5)
    out = policy.predict(obs, mode="sample", temperature=1.3)
    b, c, a = 5, 2, 4
    assert out.actions.shape == out.logprobs.shape == out.entropy.shape == (b, c, a)
    assert out.actions.dtype == out.logprobs.dtype == torch.float32
    assert out.values.shape == (b,) and out.values.dtype == torch.float32
    assert all(v.shape[0] == b for v in out.forward_inputs.values())
    low, high = torch.tensor(LOW), torch.tensor(HIGH)
    assert ((out.actions >= low) & (out.actions <= high)).all()
    # actions are the sampled tokens' bin centers mapped affinely from [-1, 1] onto [LOW, HIGH]
    centers = policy.action_tokenizer.token_ids_to_normalized(out.forward_inputs["action_tokens"])
    torch.testing.assert_close(out.actions, low + (centers + 1.0) / 2.0 * (high - low))
    assert (out.logprobs <= 0).all() and (out.entropy > 0).all()
    logp, ent, values = policy.evaluate(out.forward_inputs)
    assert torch.equal(logp, out.logprobs)  # PPO ratio is exactly 1
    assert torch.equal(ent, out.entropy)
    assert torch.equal(values, out.values)
    logp.sum().backward()
    assert policy.backbone.projector.fc1.weight.grad is not None


@pytest.mark.parametrize("family", ["openvla", "openvla_oft"])
def test_greedy_is_argmax_of_evaluate_distribution(family: str, make_obs_fn) -> None:
    """Greedy tokens are the modes of the distributions evaluate recomputes (checks the KV-cache decoding)."""
    policy = build_policy(_cfg(family))
    obs = make_obs_fn(4, seed=1)
    out = policy.predict(obs, mode="greedy")
    again = policy.predict(obs, mode="greedy")
    assert torch.equal(out.actions, again.actions)
    fi = out.forward_inputs
    hidden, _ = policy._hidden_at_actions(fi)
    from vla_models.action_logprobs import action_logits

    logits = action_logits(hidden, policy._action_weight(), temperature=fi["temperature"], top_k=fi["top_k"])
    chosen = policy.action_tokenizer.token_ids_to_offsets(fi["action_tokens"].flatten(1))
    assert torch.equal(logits.argmax(-1), chosen)


def test_top_k_restricts_sampling_and_logprobs(make_obs_fn) -> None:
    policy = build_policy(_cfg("openvla_oft"))
    obs = make_obs_fn(6)
    out = policy.predict(obs, top_k=3, temperature=2.0)
    logp, ent, _ = policy.evaluate(out.forward_inputs)
    assert torch.equal(logp, out.logprobs) and torch.equal(ent, out.entropy)
    full = policy.predict(obs, temperature=2.0)
    assert (out.entropy <= torch.log(torch.tensor(3.0)) + 1e-5).all()
    assert (full.entropy > out.entropy.max()).any()


def test_temperature_sharpens(make_obs_fn) -> None:
    policy = build_policy(_cfg("openvla_oft"))
    obs = make_obs_fn(4)
    hot = policy.predict(obs, temperature=3.0).entropy
    cold = policy.predict(obs, temperature=0.2).entropy
    assert (cold < hot).all()


def test_bad_arguments_fail_fast(make_obs_fn) -> None:
    policy = build_policy(_cfg("openvla_oft"))
    obs = make_obs_fn(2)
    with pytest.raises(ValueError, match="mode='beam'"):
        policy.predict(obs, mode="beam")
    with pytest.raises(ValueError, match="top_k"):
        policy.predict(obs, top_k=0)
    with pytest.raises(ValueError, match=r"states.*proprio_dim=4"):
        policy.predict({**obs, "states": obs["states"][:, :3]})
    with pytest.raises(ValueError, match="task_descriptions"):
        policy.predict({**obs, "task_descriptions": ["x"]})
    with pytest.raises(ValueError, match="expert_actions"):
        policy.sft_loss(obs, torch.zeros(2, 1, 4))
    with pytest.raises(ValueError, match="precision='fp8'"):
        OpenVLAOFTConfig.tiny(precision="fp8")
    with pytest.raises(ValueError, match="unknown OpenVLAOFTConfig keys"):
        OpenVLAOFTConfig.from_dict({"action_dimm": 4})
    for bad, match in (
        ({"n_action_bins": 1}, "n_action_bins must be >= 2"),
        ({"prompt_length": 0}, "prompt_length must be None or an int >= 1, got 0"),
        ({"value_head_hidden_sizes": (64, 0)}, r"value_head_hidden_sizes must be ints >= 1, got \(64, 0\)"),
    ):
        with pytest.raises(ValueError, match=match):
            OpenVLAOFTConfig.tiny(**bad)


def test_value_head_and_detached_critic(make_obs_fn) -> None:
    policy = build_policy(_cfg("openvla_oft", detach_critic_input=True))
    out = policy.predict(make_obs_fn(3))
    _, _, values = policy.evaluate(out.forward_inputs)
    values.sum().backward()
    assert policy.value_head.mlp[-1].weight.grad is not None
    assert all(p.grad is None for p in policy.backbone.parameters())
    no_head = build_policy(_cfg("openvla_oft", add_value_head=False))
    assert no_head.predict(make_obs_fn(2)).values is None


def test_lora_trains_only_adapters_and_heads(make_obs_fn) -> None:
    policy = build_policy(_cfg("openvla", is_lora=True, lora_rank=4))
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or n.startswith("value_head") for n in trainable)
    out = policy.predict(make_obs_fn(2))
    logp, _, _ = policy.evaluate(out.forward_inputs)
    logp.sum().backward()
    assert any(
        p.grad is not None and p.grad.abs().sum() > 0 for n, p in policy.named_parameters() if "lora_B" in n
    )


def test_oft_inputs_matter_proprio_wrist_film(make_obs_fn) -> None:
    cfg = _cfg("openvla_oft", num_images_in_input=2, use_film=True)
    policy = build_policy(cfg)
    obs = make_obs_fn(3, wrist=1)
    out = policy.predict(obs, mode="greedy")
    assert out.forward_inputs["images"].shape == (3, 2, 64, 64, 3)
    base, _, _ = policy.evaluate(out.forward_inputs)
    for key, change in (("states", lambda t: t + 1.0), ("images", lambda t: 255 - t)):
        fi = dict(out.forward_inputs)
        fi[key] = change(fi[key])
        moved, _, _ = policy.evaluate(fi)
        assert not torch.allclose(moved, base), key
    with pytest.raises(ValueError, match="wrist_images"):
        policy.predict(make_obs_fn(3))
    # float images would be truncated to 0/1 by a silent uint8 cast; a wrong batch size fails in torch.cat
    with pytest.raises(ValueError, match=r"wrist_images.*got torch.float32"):
        policy.predict({**obs, "wrist_images": obs["wrist_images"].astype("float32") / 255})
    with pytest.raises(ValueError, match=r"wrist_images.*got torch.uint8 \(2, 1"):
        policy.predict({**obs, "wrist_images": obs["wrist_images"][:2]})


def test_sft_loss_learns_expert_actions(make_obs_fn) -> None:
    policy = build_policy(_cfg("openvla_oft", use_proprio=False, add_value_head=False))
    obs = make_obs_fn(4)
    expert = torch.rand(4, 2, 4) * (torch.tensor(HIGH) - torch.tensor(LOW)) + torch.tensor(LOW)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    first = None
    for _ in range(30):
        loss, metrics = policy.sft_loss(obs, expert)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = first if first is not None else metrics
    assert metrics["sft/loss"] < 0.5 * first["sft/loss"]
    assert metrics["sft/token_accuracy"] > 0.3 > first["sft/token_accuracy"]
    assert metrics["sft/l1_normalized"] < first["sft/l1_normalized"]


def test_forward_inputs_of_rollouts_stack(make_obs_fn) -> None:
    """Fixed prompt width (tiny default 32): forward_inputs of different batches concatenate directly; without
    it, ``concat_forward_inputs`` pads. A different batch composition changes float rounding only."""
    from vla_models import concat_forward_inputs

    policy = build_policy(_cfg("openvla_oft"))
    short = {**make_obs_fn(2), "task_descriptions": ["reach"] * 2}
    long = make_obs_fn(3, seed=2)
    a, b = policy.predict(short), policy.predict(long)
    assert a.forward_inputs["input_ids"].shape[1] == b.forward_inputs["input_ids"].shape[1] == 32
    both = {k: torch.cat([a.forward_inputs[k], b.forward_inputs[k]]) for k in a.forward_inputs}
    logp, _, _ = policy.evaluate(both)
    torch.testing.assert_close(logp, torch.cat([a.logprobs, b.logprobs]), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="prompt_length=4"):
        build_policy(_cfg("openvla_oft", prompt_length=4)).predict(short)

    free = build_policy(_cfg("openvla_oft", prompt_length=None))
    a, b = free.predict(short), free.predict(long)
    assert a.forward_inputs["input_ids"].shape[1] < b.forward_inputs["input_ids"].shape[1]
    joined = concat_forward_inputs(
        [a.forward_inputs, b.forward_inputs], pad_token_id=free.config.backbone.pad_token_id
    )
    logp, _, _ = free.evaluate(joined)
    torch.testing.assert_close(logp, torch.cat([a.logprobs, b.logprobs]), atol=1e-5, rtol=1e-5)
    # the padding is masked out, so any valid id pads (the default 0); decisions stacked [T, B, ...] join on dim 1
    stacked = concat_forward_inputs(
        [{k: v.unsqueeze(0) for k, v in fi.items()} for fi in (a.forward_inputs, b.forward_inputs)], dim=1
    )
    assert stacked["input_ids"].shape[:2] == (1, 5)
    assert not stacked["text_mask"][
        0, :2, : stacked["input_ids"].shape[-1] - a.forward_inputs["input_ids"].shape[1]
    ].any()
    logp, _, _ = free.evaluate({k: v[0] for k, v in stacked.items()})
    torch.testing.assert_close(logp, torch.cat([a.logprobs, b.logprobs]), atol=1e-5, rtol=1e-5)


def test_config_from_flat_dict() -> None:
    from vla_models import config_from_dict

    cfg = config_from_dict(
        {
            "model_type": "openvla_oft",
            "size": "tiny",
            "patch_size": 16,
            "action_dim": 4,
            "use_proprio": True,
            "proprio_dim": 4,
            "num_action_chunks": 3,
            "add_value_head": True,
        }
    )
    assert (
        isinstance(cfg, OpenVLAOFTConfig) and cfg.backbone.num_patches == 16 and cfg.num_action_tokens == 12
    )
    big = config_from_dict(
        {"model_type": "openvla", "unnorm_key": "bridge_orig", "vocab_size": 32000, "hidden_size": 4096}
    )
    assert big.backbone.text.num_layers == 32 and big.unnorm_key == "bridge_orig"
    with pytest.raises(ValueError, match="hidden_size=64 does not match"):
        config_from_dict({"model_type": "openvla", "hidden_size": 64})
    with pytest.raises(ValueError, match="model_type='pi0'"):
        config_from_dict({"model_type": "pi0"})


def test_l1_head_regresses_actions_and_round_trips(tmp_path, make_obs_fn) -> None:
    """action_head="l1": greedy actions come from the L1 head (un-normalised), its SFT loss is OFT's L1 on
    normalised actions and learns, sampling is refused, and a saved folder gives the same actions."""
    from vla_models import load_policy

    stats = stats_from_bounds([-2.0] * 4, [2.0] * 4)
    cfg = OpenVLAOFTConfig.tiny(
        action_dim=4, num_action_chunks=2, action_head="l1", norm_stats=stats, use_proprio=True, proprio_dim=4
    )
    policy = build_policy(cfg)
    obs = make_obs_fn(4)
    expert = torch.rand(4, 2, 4) * 2.0 - 1.0
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    first = None
    for _ in range(30):
        loss, metrics = policy.sft_loss(obs, expert)
        first = first if first is not None else float(loss.detach())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert metrics["sft/loss"] < 0.5 * first
    out = policy.predict(obs, mode="greedy")
    with torch.no_grad():
        norm = policy.l1_head(policy.action_hidden_states(out.forward_inputs), 2)
    torch.testing.assert_close(out.actions, 0.5 * (norm + 1) * (4.0 + 1e-8) - 2.0)
    with pytest.raises(ValueError, match="action_head='l1'"):
        policy.predict(obs, mode="sample")
    policy.save_pretrained(tmp_path)
    again = load_policy(tmp_path)
    assert again.config.action_head == "l1" and torch.equal(
        again.predict(obs, mode="greedy").actions, out.actions
    )


def test_per_row_generators_make_a_rows_sample_independent_of_its_batch() -> None:
    """One generator per row: rows sampled in one batch or split over two batches draw the same actions."""
    from vla_models.sampling import multinomial_rows, randint_rows, randn_rows

    def gens(rows):
        return [torch.Generator().manual_seed(1000 + r) for r in rows]

    probs = torch.softmax(torch.randn(4, 3, 7), dim=-1)
    whole = multinomial_rows(probs, gens(range(4)))
    parts = torch.cat([multinomial_rows(probs[:1], gens([0])), multinomial_rows(probs[1:], gens([1, 2, 3]))])
    assert torch.equal(whole, parts)
    assert not torch.equal(whole, multinomial_rows(probs, gens([3, 2, 1, 0])))  # the row's own stream counts
    noise = randn_rows((4, 2, 5), gens(range(4)), "cpu")
    assert torch.equal(noise[2:], randn_rows((2, 2, 5), gens([2, 3]), "cpu"))
    assert torch.equal(
        randint_rows(9, 4, gens(range(4)), "cpu")[1:], randint_rows(9, 3, gens([1, 2, 3]), "cpu")
    )
    with pytest.raises(ValueError, match="3 per-row generators for a batch of 4 rows"):
        multinomial_rows(probs, gens(range(3)))


def test_constant_dims_are_deterministic_when_asked(tmp_path, make_obs_fn) -> None:
    """A dimension with q01 == q99 decodes to one action whatever its token: with constant_dims_deterministic its
    log-prob and entropy are 0 in predict and evaluate (so no gradient reaches it), the other dimensions keep
    their tokens' values, and a saved policy loaded with the setting off scores every token again."""
    low, high = [-2.0, 0.5, 0.0, 1.0], [2.0, 0.5, 0.5, 1.0]  # dims 1 and 3 constant
    stats = stats_from_bounds(low, high, key="k")
    obs = make_obs_fn(6, seed=2)
    kw = dict(action_dim=4, num_action_chunks=2, proprio_dim=4, use_proprio=True, norm_stats=stats)
    policy = build_policy(OpenVLAOFTConfig.tiny(constant_dims_deterministic=True, **kw))
    out = policy.predict(obs, mode="sample")
    constant = torch.tensor([False, True, False, True])
    assert torch.equal(out.actions[..., constant], torch.tensor([0.5, 1.0]).expand(6, 2, 2))
    assert (out.logprobs[..., constant] == 0).all() and (out.entropy[..., constant] == 0).all()
    assert (out.logprobs[..., ~constant] < 0).all() and (out.entropy[..., ~constant] > 0).all()
    logp, ent, _ = policy.evaluate(out.forward_inputs)
    assert torch.equal(logp, out.logprobs) and torch.equal(ent, out.entropy)
    policy.zero_grad()
    logp[..., constant].sum().backward()
    assert all(p.grad is None or not p.grad.any() for p in policy.parameters())

    policy.save_pretrained(tmp_path / "p")
    scored = build_policy(OpenVLAOFTConfig.tiny(model_path=str(tmp_path / "p"), **kw))
    logp_all, ent_all, _ = scored.evaluate(out.forward_inputs)
    assert (logp_all[..., constant] < 0).all() and (ent_all[..., constant] > 0).all()
    torch.testing.assert_close(logp_all[..., ~constant], logp[..., ~constant])
    with pytest.raises(ValueError, match="constant_dims_deterministic must be true or false"):
        OpenVLAOFTConfig.tiny(constant_dims_deterministic="yes", **kw)
