"""Parity with the reference framework's own arithmetic: the installed ``rlinf`` wheel (0.3.0, a test dependency,
never a run dependency of vla_algos) is the oracle. The same rollout (mid-chunk episode ends, groups that all fail
or all succeed) goes into its embodied entry points and into vla_algos with the settings that reproduce it; the
advantages, returns, losses, their gradients and the metrics that mean the same must agree within 1e-5 (float32).

What differs by design is documented in the package README ("Migrating from the reference framework") and is
checked here too, so the table cannot go stale.
"""

from __future__ import annotations

import pytest
import torch

advantages_ref = pytest.importorskip("rlinf.algorithms.advantages")
losses_ref = pytest.importorskip("rlinf.algorithms.losses")
utils_ref = pytest.importorskip("rlinf.algorithms.utils")
registry_ref = pytest.importorskip("rlinf.algorithms.registry")
rlinf_utils = pytest.importorskip("rlinf.utils.utils")

from vla_algos import (  # noqa: E402
    LossInputs,
    LossSettings,
    get_advantage_estimator,
    get_policy_loss,
    kl_penalty,
    masked_whiten,
    normalize_advantages,
    ppo_actor_loss,
    reduce_logprobs,
    rollout_action_mask,
    value_loss,
)

TOL = dict(atol=1e-5, rtol=1e-5)
T, B, C, A = 6, 8, 4, 3  # decisions, envs (two groups of 4), actions per chunk, tokens per action


def _rollout(seed: int, *, sparse: bool = False) -> dict[str, torch.Tensor]:
    """A rollout without auto-reset as the reference's env worker hands it over: per-action rewards and done flags
    [T, B, C] (dones [T + 1, B, C], the first row the previous rollout's last), chunk values [T + 1, B, 1] (the last
    row bootstraps), and the loss mask of each env's first episode per action (the reference's
    ``compute_loss_mask``). Episodes end mid-chunk; with ``sparse`` a 0/1 success reward at the end, the first
    group all failing."""
    g = torch.Generator().manual_seed(seed)
    ends = torch.randint(0, T * C, (B,), generator=g)
    ends[::3] = T * C + 5  # some envs never finish
    dones = torch.zeros(T, B, C, dtype=torch.bool)
    flat = dones.permute(0, 2, 1).reshape(T * C, B)
    for b in range(B):
        if ends[b] < T * C:
            flat[ends[b], b] = True
    dones = flat.reshape(T, C, B).permute(0, 2, 1).contiguous()
    if sparse:
        rewards = dones.float() * (torch.rand(T, B, C, generator=g) < 0.6).float()
        rewards[:, :4] = 0.0
    else:
        rewards = torch.randn(T, B, C, generator=g)
    executed = (
        dones.permute(0, 2, 1).reshape(T * C, B).int().cumsum(0)
        - dones.permute(0, 2, 1).reshape(T * C, B).int()
    ) == 0
    loss_mask = executed.reshape(T, C, B).permute(0, 2, 1).contiguous()
    values = torch.randn(T + 1, B, generator=g)
    return {
        "rewards": rewards,
        "dones": dones,
        "dones_ref": torch.cat([torch.zeros(1, B, C, dtype=torch.bool), dones]),
        "values": values,
        "loss_mask": loss_mask,
        "loss_mask_sum": loss_mask.sum(dim=(0, 2), keepdim=True).expand_as(loss_mask),
    }


def _ours(kind: str, r: dict[str, torch.Tensor], **kw):
    est = get_advantage_estimator(kind)
    return est(
        rewards=r["rewards"],
        terminated=r["dones"],
        truncated=torch.zeros_like(r["dones"]),
        loss_mask=r["loss_mask"].any(-1),
        values=r["values"][:-1],
        last_values=r["values"][-1],
        final_values=torch.zeros(T, B),
        **{"gamma": 0.99, "gae_lambda": 0.95, "group_size": 4, **kw},
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("reward_type", ["chunk_level", "action_level"])
def test_gae_advantages_and_returns_match_the_reference(seed: int, reward_type: str) -> None:
    """The reference's embodied GAE (it always whitens the advantages, with std + 1e-5 over the loss mask) against
    `adv_type: gae` with `normalize_advantages: true`, `whiten_std_eps: 1e-5`; a terminated episode is not
    bootstrapped in either. Action level: the reference's per-action values are the chunk's value repeated."""
    r = _rollout(seed)
    values_ref = r["values"][:, :, None]
    if reward_type == "action_level":
        values_ref = values_ref.expand(T + 1, B, C).contiguous()
    ref = registry_ref.calculate_adv_and_returns(
        task_type="embodied",
        adv_type="gae",
        rewards=r["rewards"],
        dones=r["dones_ref"],
        values=values_ref,
        gamma=0.99,
        gae_lambda=0.95,
        group_size=4,
        reward_type=reward_type,
        loss_mask=r["loss_mask"],
        loss_mask_sum=r["loss_mask_sum"],
    )
    est = _ours("gae", r, reward_type=reward_type)
    action_mask = rollout_action_mask(r["dones"], torch.zeros_like(r["dones"]))
    adv = normalize_advantages(est.advantages, est.loss_mask, action_mask, whiten=True, std_eps=1e-5)
    if reward_type == "chunk_level":
        torch.testing.assert_close(adv, ref["advantages"][..., 0], **TOL)
        torch.testing.assert_close(est.returns, ref["returns"][..., 0], **TOL)
    else:  # the loss sees the executed actions of the first episode (the reference's per-action loss mask)
        m = r["loss_mask"]
        torch.testing.assert_close(adv[m], ref["advantages"][m], **TOL)
        torch.testing.assert_close(
            est.returns, ref["returns"][:, :, 0], **TOL
        )  # the target of the chunk's value


def test_normalized_returns_match_the_reference() -> None:
    r = _rollout(3)
    mask = r["loss_mask"].any(-1)
    dones = torch.cat([torch.zeros(1, B, dtype=torch.bool), r["dones"].any(-1)])
    ref_adv, ref_ret = advantages_ref.compute_gae_advantages_and_returns(
        rewards=r["rewards"].sum(-1),
        values=r["values"],
        dones=dones,
        gamma=0.99,
        gae_lambda=0.95,
        normalize_advantages=False,
        normalize_returns=True,
        loss_mask=mask,
    )
    est = _ours("gae", r, reward_type="chunk_level", normalize_returns=True)
    torch.testing.assert_close(est.advantages, ref_adv, **TOL)  # the advantages are left alone
    torch.testing.assert_close(est.returns, ref_ret, **TOL)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "success-only"])
def test_grpo_advantages_match_the_reference(seed: int, sparse: bool) -> None:
    """The reference's GRPO: each env's first-episode score, undiscounted (its `gamma` is not used), against its
    group; every decision of that episode gets it. `adv_type: grpo` with the default `discount_scores: false`
    (and whatever `gamma`). A group that all fails gets 0, as there."""
    r = _rollout(seed, sparse=sparse)
    ref = registry_ref.calculate_adv_and_returns(
        task_type="embodied",
        adv_type="grpo",
        rewards=r["rewards"],
        dones=r["dones_ref"],
        values=None,
        gamma=0.9,
        gae_lambda=0.95,
        group_size=4,
        reward_type="chunk_level",
        loss_mask=r["loss_mask"],
        loss_mask_sum=r["loss_mask_sum"],
    )
    est = _ours("grpo", r, gamma=0.9, reward_type="chunk_level")
    assert get_advantage_estimator("grpo").group_normalized  # never whitened again, as there
    torch.testing.assert_close(est.advantages * est.loss_mask, ref["advantages"][..., 0].float(), **TOL)
    if sparse:
        assert bool((est.advantages[:, :4] == 0).all())
    discounted = _ours("grpo", r, gamma=0.9, reward_type="chunk_level", discount_scores=True)
    if not sparse:  # the key that keeps our discounted score gives other numbers
        assert not torch.allclose(discounted.advantages, est.advantages, atol=1e-3)


def _loss_inputs(seed: int, level: str):
    g = torch.Generator().manual_seed(seed)
    n = 16
    old = torch.randn(n, C, A, generator=g) - 2.0
    new = old + 0.4 * torch.randn(n, C, A, generator=g)
    mask = torch.rand(n, C, generator=g) < 0.7
    adv = torch.randn(n, C, generator=g)
    old_r, new_r = reduce_logprobs(old, level), reduce_logprobs(new, level)
    if level == "chunk_level":
        mask, adv = mask.any(-1), adv[:, 0]
    elif level == "token_level":
        mask, adv = mask[..., None].expand(n, C, A), adv[..., None].expand(n, C, A)
    return new_r.contiguous(), old_r.contiguous(), adv.contiguous(), mask.contiguous()


@pytest.mark.parametrize("level", ["token_level", "action_level", "chunk_level"])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"clip_ratio_c": 3.0},
        {"clip_log_ratio_min": -0.3, "clip_log_ratio_max": 0.2},
        {"clip_ratio_c": 1.5, "clip_log_ratio_min": -0.5, "clip_log_ratio_max": 0.5},
    ],
    ids=["plain", "dual-clip", "log-ratio-clip", "both"],
)
def test_ppo_actor_loss_its_gradient_and_metrics_match_the_reference(level: str, options: dict) -> None:
    new, old, adv, mask = _loss_inputs(7, level)
    lp_ref = new.clone().requires_grad_()
    loss_ref, m_ref = losses_ref.compute_ppo_actor_loss(
        logprobs=lp_ref,
        old_logprobs=old,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        advantages=adv,
        loss_mask=mask,
        **options,
    )
    loss_ref.backward()
    lp = new.clone().requires_grad_()
    loss, m = ppo_actor_loss(
        lp,
        old,
        adv,
        mask,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        dual_clip=options.get("clip_ratio_c"),
        clip_log_ratio_min=options.get("clip_log_ratio_min"),
        clip_log_ratio_max=options.get("clip_log_ratio_max"),
    )
    loss.backward()
    torch.testing.assert_close(loss, loss_ref, **TOL)
    torch.testing.assert_close(lp.grad, lp_ref.grad, **TOL)
    for ours, theirs in (("ratio", "actor/ratio"), ("clipped_ratio", "actor/clipped_ratio")):
        torch.testing.assert_close(m[ours], m_ref[theirs], **TOL)
    torch.testing.assert_close(m["clip_fraction"], m_ref["actor/clip_fraction"].float(), **TOL)
    # `approx_kl` differs by design: k3 here (>= 0), the mean of -log(ratio) (k1 of KL(old || new)) there
    log_ratio = new - old
    if options.get("clip_log_ratio_min") is not None:
        log_ratio = log_ratio.clamp(options["clip_log_ratio_min"], options["clip_log_ratio_max"])
    k1 = -(log_ratio * mask).sum() / mask.sum()
    torch.testing.assert_close(m_ref["actor/approx_kl"], k1, **TOL)


def test_token_level_clip_fraction_is_a_times_ours_with_the_references_decision_mask() -> None:
    """At token level the reference masks decisions (``[n, C, 1]``) against ``[n, C, A]`` ratios: its
    ``clip_fraction`` counts each decision's A tokens against one mask entry (the README's metric table)."""
    new, old, adv, mask = _loss_inputs(11, "token_level")
    decision_mask = mask[..., :1]  # the reference's token-level loss mask
    _, m_ref = losses_ref.compute_ppo_actor_loss(
        logprobs=new,
        old_logprobs=old,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        advantages=adv,
        loss_mask=decision_mask,
    )
    _, m = ppo_actor_loss(new, old, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.28)
    assert 0.0 < float(m["clip_fraction"]) < 1.0
    torch.testing.assert_close(m_ref["actor/clip_fraction"].float(), A * m["clip_fraction"], **TOL)
    torch.testing.assert_close(m["ratio"], m_ref["actor/ratio"], **TOL)  # the ratio metric is broadcast there


@pytest.mark.parametrize("huber_delta", [10.0, 0.3])
@pytest.mark.parametrize("value_clip", [0.2, 5.0])
def test_critic_loss_its_gradient_and_explained_variance_match_the_reference(
    huber_delta: float, value_clip: float
) -> None:
    g = torch.Generator().manual_seed(5)
    n = 32
    old = torch.randn(n, generator=g)
    new = old + 0.5 * torch.randn(n, generator=g)
    returns = torch.randn(n, generator=g) * 2
    mask = torch.rand(n, generator=g) < 0.8
    v_ref = new.clone().requires_grad_()
    loss_ref, m_ref = losses_ref.compute_ppo_critic_loss(
        values=v_ref,
        returns=returns,
        prev_values=old,
        value_clip=value_clip,
        huber_delta=huber_delta,
        loss_mask=mask,
    )
    loss_ref.backward()
    v = new.clone().requires_grad_()
    loss, _ = value_loss(v, old, returns, mask, value_clip=value_clip, huber_delta=huber_delta)
    loss.backward()
    torch.testing.assert_close(loss, loss_ref, **TOL)
    torch.testing.assert_close(v.grad, v_ref.grad, **TOL)
    # the whole objective reports the same explained variance (`actor_critic` with value_loss_coef 1: the
    # reference's value loss is added with weight 1)
    lp = torch.zeros(n, requires_grad=True)
    total, metrics = get_policy_loss("actor_critic")(
        LossInputs(
            logprobs=lp,
            old_logprobs=torch.zeros(n),
            advantages=torch.zeros(n),
            sample_weight=mask,
            values=new.clone(),
            old_values=old,
            returns=returns,
            value_mask=mask,
        ),
        LossSettings(
            clip_ratio_low=0.2,
            clip_ratio_high=0.2,
            value_clip=value_clip,
            huber_delta=huber_delta,
            value_loss_coef=1.0,
        ),
    )
    torch.testing.assert_close(total, loss_ref.detach(), **TOL)
    torch.testing.assert_close(
        metrics["critic/explained_variance"], m_ref["critic/explained_variance"], **TOL
    )


@pytest.mark.parametrize("kind", ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"])
def test_kl_penalty_matches_the_reference_under_every_name(kind: str) -> None:
    g = torch.Generator().manual_seed(2)
    logp = torch.randn(200, generator=g) * 3
    ref_logp = torch.randn(200, generator=g) * 3
    logp[:3] = torch.tensor([40.0, -40.0, 15.0])  # the reference's clamps of low_var_kl
    ours = kl_penalty(logp, ref_logp, kind)
    torch.testing.assert_close(ours, utils_ref.kl_penalty(logp, ref_logp, kind), **TOL)


def test_whitening_with_std_eps_is_the_references_safe_normalize() -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(T, B, generator=g) * 0.01  # a small spread, where std + eps and sqrt(var + eps) part
    mask = torch.rand(T, B, generator=g) < 0.6
    ref = utils_ref.safe_normalize(x, mask)
    torch.testing.assert_close(masked_whiten(x, mask, std_eps=1e-5), ref, **TOL)
    assert not torch.allclose(masked_whiten(x, mask), ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("entropy_type", ["action_level", "chunk_level"])
def test_entropy_type_sums_as_the_reference(entropy_type: str) -> None:
    """`entropy_type` reduces per-token entropies [N, C, A] by summing, as the reference's `reshape_entropy` (which
    takes them flattened to [N, C * A])."""
    g = torch.Generator().manual_seed(6)
    ent = torch.rand(5, C, A, generator=g)
    ref = rlinf_utils.reshape_entropy(
        ent.reshape(5, C * A), entropy_type=entropy_type, action_dim=A, batch_size=5
    )
    torch.testing.assert_close(reduce_logprobs(ent, entropy_type), ref, **TOL)


@pytest.mark.parametrize("adv_type", ["gae", "grpo"])
def test_rollout_advantages_with_its_defaults_gives_the_references_advantages(adv_type: str) -> None:
    """The one call a trainer makes, with `normalize=True` and the default `whiten_std_eps` and `discount_scores`:
    the reference's GAE (whitened) and GRPO (never whitened again) advantages."""
    from vla_algos import rollout_advantages

    r = _rollout(11, sparse=adv_type == "grpo")
    ref = registry_ref.calculate_adv_and_returns(
        task_type="embodied",
        adv_type=adv_type,
        rewards=r["rewards"],
        dones=r["dones_ref"],
        values=r["values"][:, :, None] if adv_type == "gae" else None,
        gamma=0.99,
        gae_lambda=0.95,
        group_size=4,
        reward_type="chunk_level",
        loss_mask=r["loss_mask"],
        loss_mask_sum=r["loss_mask_sum"],
    )
    out = rollout_advantages(
        rewards=r["rewards"],
        terminated=r["dones"],
        truncated=torch.zeros_like(r["dones"]),
        loss_mask=r["loss_mask"].any(-1),
        values=r["values"][:-1] if adv_type == "gae" else None,
        last_values=r["values"][-1],
        final_values=torch.zeros(T, B),
        adv_type=adv_type,
        gamma=0.99,
        gae_lambda=0.95,
        reward_type="chunk_level",
        logprob_type="action_level",
        group_size=4,
        loss_agg_mode="token-mean",
        normalize=True,
    )
    expected = ref["advantages"][..., 0].float()
    torch.testing.assert_close(out.advantages * out.loss_mask, expected * out.loss_mask, **TOL)
    assert torch.equal(out.loss_mask, r["loss_mask"].any(-1))


@pytest.mark.parametrize("logprob_type", ["action_level", "token_level"])
def test_seq_mean_token_mean_has_the_reference_embodied_actors_relative_weights(logprob_type: str) -> None:
    """One update step over the whole rollout as the reference's embodied actor computes it (`policy_loss` with
    per-action rewards, its loss mask of each env's first episode and `max_episode_steps`: every entry divided by
    its episode's executed actions / max_episode_steps, averaged over every entry, a filtered group's rows
    included) against `seq-mean-token-mean` weights (per loss entry) in `ppo_actor_loss`. The relative weights are
    the same; the reference's loss is ours times (kept episodes x max_episode_steps / entries), a scale the
    README documents. Loss and gradient both."""
    from vla_algos import episode_mean_weights

    r = _rollout(13)
    n, max_steps = T * B, T * C
    kept = torch.ones(B, dtype=torch.bool)
    kept[4:] = False  # the second group was removed by the reward filter
    mask_actions = r["loss_mask"] & kept[None, :, None]  # [T, B, C]
    g = torch.Generator().manual_seed(3)
    old = torch.randn(T, B, C, A, generator=g) - 2.0
    new = old + 0.3 * torch.randn(T, B, C, A, generator=g)
    adv = torch.randn(T, B, C, generator=g)
    flat = lambda x: x.reshape(n, *x.shape[2:])  # noqa: E731  [T, B, ...] -> [T * B, ...] as the reference's batch

    lp_ref = flat(new).reshape(n, C * A).clone().requires_grad_()
    loss_ref, _ = registry_ref.policy_loss(
        task_type="embodied",
        loss_type="actor",
        logprob_type=logprob_type,
        reward_type="action_level",
        single_action_dim=A,
        logprobs=lp_ref,
        old_logprobs=flat(old).reshape(n, C * A),
        advantages=flat(adv),
        loss_mask=flat(mask_actions),
        loss_mask_sum=flat(r["loss_mask_sum"]),
        max_episode_steps=max_steps,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
    )
    loss_ref.backward()

    decisions = mask_actions.any(-1)
    weights = episode_mean_weights(decisions, r["dones"].any(-1), entries=mask_actions.sum(-1))
    lp = flat(new).clone().requires_grad_()
    per_entry = flat(weights)[:, None] * flat(mask_actions)  # [N, C]: each executed action of a decision
    loss, _ = ppo_actor_loss(
        reduce_logprobs(lp, logprob_type),
        reduce_logprobs(flat(old), logprob_type),
        flat(adv),
        per_entry,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
    )
    loss.backward()
    entries = n * C * (A if logprob_type == "token_level" else 1)
    scale = int(kept.sum()) * max_steps * (A if logprob_type == "token_level" else 1) / entries
    torch.testing.assert_close(loss * scale, loss_ref, **TOL)
    torch.testing.assert_close(lp.grad.reshape(n, C * A) * scale, lp_ref.grad, **TOL)
