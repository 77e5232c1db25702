"""loss_type objectives, adv_type estimators, loss_agg_mode weights and the name registries."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from vla_algos import (
    ADVANTAGE_ESTIMATORS,
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    EstimatedAdvantages,
    LossInputs,
    LossSettings,
    WeightSums,
    actor_critic_loss,
    actor_loss,
    compute_gae,
    compute_grpo_advantages,
    episode_mean_weights,
    first_episode_scores,
    gae_estimator,
    get_advantage_estimator,
    get_loss_agg_mode,
    get_policy_loss,
    grpo_estimator,
    ppo_actor_loss,
    register_advantage_estimator,
    register_policy_loss,
    value_loss,
)

CLIP = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.2}
#: clipping 0.2 / 0.2, no value clip, the critic added with weight 1, no entropy bonus, no KL term
SETTINGS = LossSettings(**CLIP, value_clip=None, value_loss_coef=1.0)


def settings(**kw) -> LossSettings:
    return dataclasses.replace(SETTINGS, **kw)


def batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return {
        "logprobs": torch.randn(4, 2, 3, generator=g, requires_grad=True),
        "old_logprobs": torch.randn(4, 2, 3, generator=g),
        "advantages": torch.randn(4, generator=g),
        "sample_weight": torch.tensor([True, True, False, True]),
        "values": torch.randn(4, generator=g, requires_grad=True),
        "old_values": torch.randn(4, generator=g),
        "returns": torch.randn(4, generator=g),
    }


def test_actor_critic_is_actor_plus_weighted_critic():
    b = batch()
    loss, metrics = actor_critic_loss(
        LossInputs(**b, value_mask=b["sample_weight"]),
        settings(value_clip=0.5, huber_delta=1.0, value_loss_coef=0.25),
    )
    policy, _ = ppo_actor_loss(b["logprobs"], b["old_logprobs"], b["advantages"], b["sample_weight"], **CLIP)
    critic, _ = value_loss(
        b["values"], b["old_values"], b["returns"], b["sample_weight"], value_clip=0.5, huber_delta=1.0
    )
    torch.testing.assert_close(loss, policy + 0.25 * critic)
    assert set(metrics) == {
        "actor/policy_loss",
        "actor/approx_kl",
        "actor/clip_fraction",
        "actor/clipped_ratio",
        "actor/dual_clip_fraction",
        "actor/ratio",
        "critic/value_loss",
        "critic/value_clip_ratio",
        "critic/explained_variance",
    }
    loss.backward()
    assert b["logprobs"].grad.abs().sum() > 0 and b["values"].grad.abs().sum() > 0
    assert b["values"].grad[2] == 0  # masked-out sample


def test_actor_ignores_critic_inputs():
    b = batch()
    loss, metrics = actor_loss(LossInputs(**b), SETTINGS)
    loss.backward()
    assert b["values"].grad is None
    assert all(k.startswith("actor/") for k in metrics)
    without_critic = {k: v for k, v in b.items() if k not in ("values", "old_values", "returns")}
    torch.testing.assert_close(actor_loss(LossInputs(**without_critic), SETTINGS)[0], loss)


def test_actor_critic_requires_critic_inputs():
    b = batch()
    del b["returns"], b["old_values"]
    with pytest.raises(ValueError, match="`old_values`, `returns` required"):
        actor_critic_loss(LossInputs(**b), SETTINGS)


def test_registries_resolve_config_names():
    gae, grpo = get_advantage_estimator("gae"), get_advantage_estimator("grpo")
    assert gae.fn is gae_estimator and gae.needs_values and not gae.grouped_starts
    assert grpo.fn is grpo_estimator and grpo.grouped_starts and not grpo.needs_values
    assert (
        get_policy_loss("actor_critic").fn is actor_critic_loss
        and get_policy_loss("actor_critic").uses_critic
    )
    assert get_policy_loss("actor").fn is actor_loss and not get_policy_loss("actor").uses_critic
    assert get_loss_agg_mode("seq-mean-token-mean") is episode_mean_weights
    assert (
        get_loss_agg_mode("token-mean")(
            torch.ones(2, 2, dtype=torch.bool), torch.ones(2, 2, dtype=torch.bool)
        )
        is None
    )
    assert set(ADVANTAGE_ESTIMATORS) == {"gae", "grpo"} and set(POLICY_LOSSES) == {"actor_critic", "actor"}
    assert set(LOSS_AGG_MODES) == {"token-mean", "seq-mean-token-mean"}


def test_registered_estimators_match_the_plain_functions():
    """The rollout-level estimators are GAE / GRPO of vla_algos on the chunk-summed rollout."""
    g = torch.Generator().manual_seed(0)
    t, b, c = 5, 4, 3
    rewards = torch.randn(t, b, c, generator=g)
    terminated = torch.zeros(t, b, c, dtype=torch.bool)
    terminated[2, 1, 1] = True
    truncated = torch.zeros(t, b, c, dtype=torch.bool)
    truncated[4, 3, 2] = True
    values, last, final = (
        torch.randn(t, b, generator=g),
        torch.randn(b, generator=g),
        torch.randn(t, b, generator=g),
    )
    mask = torch.ones(t, b, dtype=torch.bool)
    kw = dict(
        rewards=rewards,
        terminated=terminated,
        truncated=truncated,
        loss_mask=mask,
        values=values,
        last_values=last,
        final_values=final,
        gamma=0.9,
        gae_lambda=0.8,
        reward_type="chunk_level",
        group_size=2,
        reward_bounds=None,
    )
    est = get_advantage_estimator("gae")(**kw)
    done = terminated.any(-1) | truncated.any(-1)
    nxt = torch.where(done, final, torch.cat([values[1:], last[None]]))
    adv, ret = compute_gae(rewards.sum(-1), values, nxt, terminated.any(-1), done, gamma=0.9, lam=0.8)
    assert torch.equal(est.advantages, adv) and torch.equal(est.returns, ret)
    grpo = get_advantage_estimator("grpo")(**kw)  # the score is the undiscounted sum
    scores = first_episode_scores(rewards.sum(-1), done, gamma=1.0)
    assert torch.equal(grpo.advantages[0], compute_grpo_advantages(scores, group_size=2))
    discounted = get_advantage_estimator("grpo")(**kw, discount_scores=True)
    scores = first_episode_scores(rewards.sum(-1), done, gamma=0.9)
    assert torch.equal(discounted.advantages[0], compute_grpo_advantages(scores, group_size=2))
    assert not torch.equal(discounted.advantages, grpo.advantages)
    assert grpo.returns is None and not grpo.loss_mask[3:, 1].any()  # env 1's first episode ended at t=2


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="unknown adv_type 'reinforce'; valid: gae, grpo"):
        get_advantage_estimator("reinforce")
    with pytest.raises(ValueError, match="unknown loss_type 'critic'; valid: actor, actor_critic"):
        get_policy_loss("critic")
    with pytest.raises(
        ValueError, match="unknown loss_agg_mode 'sum'; valid: seq-mean-token-mean, token-mean"
    ):
        get_loss_agg_mode("sum")


def test_register_refuses_duplicates_and_adds_new_names():
    with pytest.raises(ValueError, match="loss_type 'actor' is already registered"):
        register_policy_loss("actor", actor_loss)
    register_policy_loss("test_only_loss", actor_loss, uses_critic=False)
    try:
        assert get_policy_loss("test_only_loss").fn is actor_loss
    finally:
        del POLICY_LOSSES["test_only_loss"]


def test_entropy_bonus_weight_sums_and_warmup_compose_the_loss():
    b = batch()
    entropy = torch.rand(4, 2, generator=torch.Generator().manual_seed(3), requires_grad=True)
    plain, _ = actor_loss(LossInputs(**b), SETTINGS)
    # 3 kept samples x 6 tokens = 18 policy entries, 8 entropy entries: weight sums of half of them double the terms
    loss, metrics = actor_loss(
        LossInputs(**b, entropy=entropy),
        settings(entropy_bonus=0.1),
        WeightSums(policy=9.0, entropy=16.0),
    )
    torch.testing.assert_close(loss, 2.0 * plain - 0.1 * 0.5 * entropy.mean())
    torch.testing.assert_close(metrics["actor/entropy_loss"], 0.5 * entropy.mean().detach())
    warm, warm_metrics = actor_critic_loss(LossInputs(**b, entropy=entropy, train_policy=False), SETTINGS)
    critic, _ = value_loss(b["values"], b["old_values"], b["returns"])
    torch.testing.assert_close(warm, critic)  # critic warm-up: the value loss alone, over all entries
    warm.backward()
    assert entropy.grad is None and b["logprobs"].grad is None
    assert "actor/policy_loss" in warm_metrics


def test_a_new_estimator_is_one_registered_function():
    def reinforce(*, rewards, loss_mask, **unused):
        adv = rewards.sum(-1)
        return EstimatedAdvantages(advantages=adv, returns=None, loss_mask=loss_mask)

    register_advantage_estimator("test_reinforce", reinforce, grouped_starts=False)
    try:
        est = get_advantage_estimator("test_reinforce")
        out = est(rewards=torch.ones(2, 3, 4), loss_mask=torch.ones(2, 3, dtype=torch.bool), gamma=0.9)
        assert torch.equal(out.advantages, torch.full((2, 3), 4.0)) and not est.needs_values
    finally:
        del ADVANTAGE_ESTIMATORS["test_reinforce"]


@pytest.mark.parametrize("objective", [actor_loss, actor_critic_loss])
def test_kl_term_adds_the_masked_reference_penalty(objective):
    """`ref_logprobs` adds kl_beta x the masked mean of `kl_penalty` (normalised by the policy weight sum like the
    policy term), with a gradient towards the reference, and is reported as actor/kl_loss before kl_beta."""
    from vla_algos import kl_penalty, masked_mean

    b = batch()
    ref = b["old_logprobs"] + 0.3 * torch.randn(4, 2, 3, generator=torch.Generator().manual_seed(1))
    # 18 kept entries: a weight sum of 36 halves the policy and KL terms
    with_kl, metrics = objective(
        LossInputs(**b, ref_logprobs=ref), settings(kl_beta=0.5, kl_penalty="k2"), WeightSums(policy=36.0)
    )
    plain_scaled, _ = objective(LossInputs(**b), SETTINGS, WeightSums(policy=36.0))
    expected_kl = masked_mean(kl_penalty(b["logprobs"], ref, "k2"), b["sample_weight"]) * 0.5
    torch.testing.assert_close(with_kl, plain_scaled + 0.5 * expected_kl)
    torch.testing.assert_close(metrics["actor/kl_loss"], expected_kl.detach())
    assert "actor/kl_loss" not in objective(LossInputs(**b), SETTINGS)[1]
    # the KL term alone pulls log-probs towards the reference's: its gradient is (logp - ref) on kept rows
    lp = b["logprobs"].detach().clone().requires_grad_(True)
    only_kl, _ = objective(
        LossInputs(**{**b, "logprobs": lp, "advantages": torch.zeros(4)}, ref_logprobs=ref),
        settings(kl_beta=1.0, kl_penalty="k2"),
    )
    only_kl.backward()
    kept = b["sample_weight"].float().reshape(4, 1, 1)
    torch.testing.assert_close(lp.grad, (lp.detach() - ref) * kept / (kept.sum() * 6))
    # a critic warm-up trains no policy: the KL term adds nothing then
    frozen, _ = objective(LossInputs(**b, ref_logprobs=ref, train_policy=False), settings(kl_beta=1.0))
    torch.testing.assert_close(frozen, objective(LossInputs(**b, train_policy=False), SETTINGS)[0])


@pytest.mark.parametrize("logprob_level", ["token", "action", "chunk"])
def test_micro_batches_normalised_by_the_minibatch_weight_sum_add_up_to_it(logprob_level: str):
    """verl's form: each part's terms are `sum(w * x) / W` with W the whole minibatch's `total_weight`, computed
    once. Split into parts of 1, 2 and all samples, the losses, metrics and gradients add up to the whole's (its
    weighted mean) within 1e-6: episode weights, unexecuted actions, entropy, KL and critic terms."""
    from vla_algos import entry_weights, total_weight

    g = torch.Generator().manual_seed(7)
    n, c, a = 6, 2, 3
    lp = torch.randn(n, c, a, generator=g)
    lp = {"token": lp, "action": lp.sum(-1), "chunk": lp.sum((-2, -1))}[logprob_level]
    old = lp + 0.2 * torch.randn(lp.shape, generator=g)
    ref = lp + 0.3 * torch.randn(lp.shape, generator=g)
    adv = torch.randn(n, generator=g)
    action_mask = torch.rand(n, c, generator=g) < 0.7
    action_mask[:, 0] = True
    sample_weight = torch.rand(n, generator=g) + 0.1
    entropy = torch.rand(n, c, a, generator=g)
    values, old_values, returns = (torch.randn(n, generator=g) for _ in range(3))

    mask = entry_weights(sample_weight, action_mask, ndim=lp.ndim)
    sums = WeightSums(
        policy=total_weight(mask, lp.shape),
        entropy=total_weight(action_mask, entropy.shape),
        value=total_weight(None, values.shape),
    )
    # the log-probs are reduced beforehand: the loss takes them as they are (token_level)
    loss_settings = settings(entropy_bonus=0.1, kl_beta=0.5, value_clip=0.3)

    def run(parts, norm=None):
        leaves = [x.clone().requires_grad_() for x in (lp, entropy, values)]
        total, metrics = 0.0, {}
        for idx in parts:
            loss, m = actor_critic_loss(
                LossInputs(
                    logprobs=leaves[0][idx],
                    old_logprobs=old[idx],
                    advantages=adv[idx],
                    sample_weight=sample_weight[idx],
                    action_mask=action_mask[idx],
                    entropy=leaves[1][idx],
                    ref_logprobs=ref[idx],
                    values=leaves[2][idx],
                    old_values=old_values[idx],
                    returns=returns[idx],
                ),
                loss_settings,
                norm,
            )
            total = total + loss
            for k, v in m.items():
                metrics[k] = metrics.get(k, 0.0) + v
        total.backward()
        metrics.pop("critic/explained_variance")
        return total.detach(), metrics, [x.grad for x in leaves]

    whole_loss, whole_metrics, whole_grads = run([torch.arange(n)])  # the plain weighted means
    for size in (1, 2, n):
        parts = list(torch.arange(n).split(size))
        loss, metrics, grads = run(parts, sums)
        torch.testing.assert_close(loss, whole_loss, atol=1e-6, rtol=1e-6)
        for k, v in whole_metrics.items():
            torch.testing.assert_close(metrics[k], v, atol=1e-6, rtol=1e-6, msg=k)
        for got, want in zip(grads, whole_grads):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_total_weight_counts_every_entry_a_mask_covers():
    from vla_algos import agg_loss, total_weight

    assert float(total_weight(None, (4, 2, 3))) == 24.0
    mask = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    assert float(total_weight(mask, (2, 2, 3))) == 6.0  # each action's weight over its 3 tokens
    with pytest.raises(ValueError, match="leading part"):
        total_weight(mask, (2, 3))
    x = torch.ones(2, 2, 3)
    assert float(agg_loss(x, mask, weight_sum=12.0)) == 0.5
    assert float(agg_loss(x, mask)) == 1.0  # no weight sum: the masked mean
    assert float(agg_loss(x, torch.zeros(2, 2), weight_sum=0.0)) == 0.0  # nothing to average: 0, not NaN
