"""KL estimators and masked reductions."""

from __future__ import annotations

import pytest
import torch

from vla_algos import (
    KL_KINDS,
    kl_penalty,
    masked_group_whiten,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    normalize_advantages,
)


def test_kl_kinds_against_formulas():
    logp = torch.tensor([-1.0, -2.0, -0.5])
    ref = torch.tensor([-1.5, -1.0, -0.5])
    d = logp - ref
    torch.testing.assert_close(kl_penalty(logp, ref, "k1"), d)
    torch.testing.assert_close(kl_penalty(logp, ref, "k2"), 0.5 * d**2)
    torch.testing.assert_close(kl_penalty(logp, ref, "k3"), torch.exp(ref - logp) - (ref - logp) - 1)
    torch.testing.assert_close(kl_penalty(logp, ref, kind="abs"), d.abs())
    for kind in KL_KINDS:
        assert kl_penalty(logp, logp, kind).abs().max() == 0


def test_kl_estimators_recover_true_kl_of_categoricals():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(6, generator=g), 0)
    q = torch.softmax(torch.randn(6, generator=g), 0)
    true_kl = (p * (p.log() - q.log())).sum()
    samples = torch.multinomial(p, 400_000, replacement=True, generator=g)
    logp, ref = p.log()[samples], q.log()[samples]
    for kind in ("k1", "k3"):  # the unbiased ones
        assert abs(kl_penalty(logp, ref, kind).mean() - true_kl) < 0.01
    assert (kl_penalty(logp, ref, "k3") >= 0).all()


def test_kl_errors():
    with pytest.raises(ValueError, match=r"unknown `kind` .k4.; valid: k1, k2, k3, abs, kl, mse, low_var_kl"):
        kl_penalty(torch.zeros(2), torch.zeros(2), "k4")
    with pytest.raises(ValueError, match="`ref_logp` has shape \\(3,\\)"):
        kl_penalty(torch.zeros(2), torch.zeros(3))


def test_masked_mean_sum_ignore_padding():
    x = torch.tensor([[1.0, 2.0, float("nan")], [3.0, 1e30, 5.0]])
    mask = torch.tensor([[True, True, False], [True, False, True]])
    torch.testing.assert_close(masked_sum(x, mask), torch.tensor(11.0))
    torch.testing.assert_close(masked_mean(x, mask), torch.tensor(11.0 / 4))
    torch.testing.assert_close(masked_mean(x, mask, dim=1), torch.tensor([1.5, 4.0]))
    weights = torch.tensor([[1.0, 3.0, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(masked_mean(x, weights), torch.tensor((1.0 + 6.0) / 4.0))


def test_masked_mean_leading_mask_and_empty_selection():
    x = torch.arange(12.0).view(2, 3, 2)
    torch.testing.assert_close(masked_mean(x, torch.tensor([False, True])), x[1].mean())
    empty = masked_mean(x.requires_grad_(), torch.zeros(2, dtype=torch.bool))
    assert empty.item() == 0.0
    empty.backward()
    assert torch.equal(x.grad, torch.zeros_like(x))
    with pytest.raises(ValueError, match="`mask` has shape \\(3,\\)"):
        masked_mean(x, torch.ones(3, dtype=torch.bool))


def test_masked_var_and_whiten():
    x = torch.tensor([1.0, 2.0, 3.0, 100.0])
    mask = torch.tensor([1, 1, 1, 0], dtype=torch.bool)
    torch.testing.assert_close(masked_var(x, mask), torch.tensor([1.0, 2.0, 3.0]).var())
    torch.testing.assert_close(
        masked_var(x, mask, unbiased=False), torch.tensor([1.0, 2.0, 3.0]).var(unbiased=False)
    )
    w = masked_whiten(x, mask)
    torch.testing.assert_close(w[:3], torch.tensor([-1.0, 0.0, 1.0]), atol=1e-6, rtol=0)
    y = torch.tensor([2.0, 4.0, 6.0, -50.0])  # masked std 2, mean 4
    kept_mean = masked_whiten(y, mask, shift_mean=False)
    torch.testing.assert_close(kept_mean[:3], torch.tensor([3.0, 4.0, 5.0]), atol=1e-5, rtol=0)


def test_group_whiten_is_masked_whiten_within_each_group():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 6, 3, generator=g)
    mask = torch.rand(7, 6, 3, generator=g) > 0.3
    groups = torch.tensor([0, 1, 0, 3, 1, 0])  # group 2 has no column: nothing to whiten
    out = masked_group_whiten(x, mask, groups, 4)
    for k in (0, 1, 3):
        cols = (groups == k).nonzero().flatten()
        torch.testing.assert_close(out[:, cols], masked_whiten(x[:, cols], mask[:, cols]), atol=1e-5, rtol=0)
    # a group whose entries are all masked out keeps its values; [T, B] advantages with a [T, B] mask
    none = torch.zeros(7, 6, dtype=torch.bool)
    none[:, :3] = True
    y = x[..., 0]
    kept = masked_group_whiten(y, none, torch.tensor([0, 0, 0, 1, 1, 1]), 2)
    centred = masked_group_whiten(x, mask, groups, 4, scale=False)
    for k in (0, 1, 3):
        cols = (groups == k).nonzero().flatten()
        torch.testing.assert_close(centred[:, cols], x[:, cols] - masked_mean(x[:, cols], mask[:, cols]))
    torch.testing.assert_close(kept[:, 3:], y[:, 3:])
    torch.testing.assert_close(kept[:, :3], masked_whiten(y[:, :3], none[:, :3]), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="groups must have shape"):
        masked_group_whiten(x, mask, groups[:5], 4)
    with pytest.raises(ValueError, match="groups must lie in"):
        masked_group_whiten(x, mask, groups, 3)


def test_normalize_advantages_by_group_zeroes_each_groups_mean():
    g = torch.Generator().manual_seed(1)
    adv = torch.randn(5, 4, generator=g) + torch.tensor([0.0, 3.0, 0.0, 3.0])  # group 1 is rated 3 higher
    loss_mask = torch.ones(5, 4, dtype=torch.bool)
    action_mask = torch.ones(5, 4, 2, dtype=torch.bool)
    groups = torch.tensor([0, 1, 0, 1])
    out = normalize_advantages(adv, loss_mask, action_mask, whiten=True, groups=groups, num_groups=2)
    for k in (0, 1):
        assert abs(float(out[:, groups == k].mean())) < 1e-5
    pooled = normalize_advantages(adv, loss_mask, action_mask, whiten=True)
    assert float(pooled[:, groups == 1].mean() - pooled[:, groups == 0].mean()) > 1.0
    # center: each group's mean subtracted, then one std for all (group 0 and 1 keep their spread ratio)
    centred = normalize_advantages(
        adv, loss_mask, action_mask, whiten=True, groups=groups, num_groups=2, group_mode="center"
    )
    for k in (0, 1):
        assert abs(float(centred[:, groups == k].mean())) < 1e-5
    assert float(centred.std()) == pytest.approx(1.0, rel=1e-4)
    ratio = adv[:, groups == 1].std() / adv[:, groups == 0].std()
    assert float(centred[:, groups == 1].std() / centred[:, groups == 0].std()) == pytest.approx(
        float(ratio), rel=1e-4
    )
    with pytest.raises(ValueError, match="needs `num_groups`"):
        normalize_advantages(adv, loss_mask, action_mask, whiten=True, groups=groups)
    with pytest.raises(ValueError, match="group_mode='scale' is not one of"):
        normalize_advantages(
            adv, loss_mask, action_mask, whiten=True, groups=groups, num_groups=2, group_mode="scale"
        )
