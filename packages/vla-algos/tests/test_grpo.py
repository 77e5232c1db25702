"""GRPO group advantages, group filtering and first-episode helpers."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vla_algos import (
    compute_grpo_advantages,
    first_episode_mask,
    first_episode_scores,
    group_reward_filter,
    labelled_reward_filter,
)


def test_group_advantages_hand_computed():
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 5.0, 5.0, 5.0, 5.0])
    adv = compute_grpo_advantages(scores, group_size=4, eps=0.0 + 1e-6)
    std = torch.tensor([1.0, 0.0, 0.0, 1.0]).std()  # unbiased: sqrt(1/3)
    torch.testing.assert_close(adv[:4], (torch.tensor([1.0, 0.0, 0.0, 1.0]) - 0.5) / (std + 1e-6))
    torch.testing.assert_close(adv[4:], torch.zeros(4))  # equal scores: no signal, no NaN


def test_without_std_normalisation_only_centres():
    scores = torch.tensor([3.0, 1.0, 10.0, 20.0])
    adv = compute_grpo_advantages(scores, group_size=2, normalize_by_std=False)
    torch.testing.assert_close(adv, torch.tensor([1.0, -1.0, -5.0, 5.0]))


@settings(max_examples=50, deadline=None)
@given(
    groups=st.integers(1, 6),
    group_size=st.integers(2, 8),
    seed=st.integers(0, 2**31 - 1),
    normalize=st.booleans(),
)
def test_group_properties(groups, group_size, seed, normalize):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(groups * group_size, generator=g, dtype=torch.float64) * 3
    adv = compute_grpo_advantages(scores, group_size=group_size, normalize_by_std=normalize).view(groups, -1)
    torch.testing.assert_close(adv.sum(dim=1), torch.zeros(groups, dtype=torch.float64), atol=1e-9, rtol=0)
    # ordering within a group is preserved
    grouped = scores.view(groups, -1)
    assert torch.equal(adv.argsort(dim=1), grouped.argsort(dim=1))
    if normalize:
        assert torch.all(adv.std(dim=1) <= 1.0 + 1e-9)
    # shifting a group's scores by a constant does not change its advantages
    shifted = compute_grpo_advantages(scores + 7.0, group_size=group_size, normalize_by_std=normalize)
    torch.testing.assert_close(shifted.view(groups, -1), adv)


def test_group_size_must_divide_batch():
    with pytest.raises(ValueError, match="`group_size`=3 does not divide the batch: `scores` has 8"):
        compute_grpo_advantages(torch.zeros(8), group_size=3)
    with pytest.raises(ValueError, match="`group_size`=3 does not divide"):
        group_reward_filter(torch.zeros(8), group_size=3, lower=0.1, upper=0.9)


@pytest.mark.parametrize("bad", [0, -2, 1.5])
def test_bad_group_size(bad):
    with pytest.raises(ValueError, match="`group_size` must be a positive int"):
        compute_grpo_advantages(torch.zeros(4), group_size=bad)


def test_group_of_one_needs_no_std():
    with pytest.raises(ValueError, match="`group_size` must be >= 2 when normalize_by_std"):
        compute_grpo_advantages(torch.zeros(4), group_size=1)
    torch.testing.assert_close(
        compute_grpo_advantages(torch.ones(4), group_size=1, normalize_by_std=False), torch.zeros(4)
    )


def test_scores_must_be_flat_and_finite_when_checked():
    with pytest.raises(ValueError, match="`scores` must have shape \\[N\\]"):
        compute_grpo_advantages(torch.zeros(2, 4), group_size=2)
    with pytest.raises(ValueError, match="`scores` holds 1 non-finite"):
        compute_grpo_advantages(torch.tensor([0.0, float("nan")]), group_size=2, check_finite=True)


def test_filter_drops_all_fail_and_all_success_groups():
    # RLinf LIBERO GRPO: reward_coef 5, bounds 0.5 / 4.5
    scores = torch.tensor([0.0, 0.0, 0.0, 0.0, 5.0, 0.0, 5.0, 0.0, 5.0, 5.0, 5.0, 5.0, 5.0, 0.0, 0.0, 0.0])
    keep = group_reward_filter(scores, group_size=4, lower=0.5, upper=4.5)
    expected = torch.tensor([False] * 4 + [True] * 4 + [False] * 4 + [True] * 4)
    assert keep.dtype == torch.bool and torch.equal(keep, expected)


def test_filter_bounds_are_inclusive_and_ordered():
    scores = torch.tensor([1.0, 0.0, 2.0, 2.0])  # means 0.5 and 2.0
    assert group_reward_filter(scores, group_size=2, lower=0.5, upper=2.0).all()
    assert not group_reward_filter(scores, group_size=2, lower=0.6, upper=1.9).any()
    with pytest.raises(ValueError, match=r"`lower` \(2\.0\) must be <= `upper` \(1\.0\)"):
        group_reward_filter(scores, group_size=2, lower=2.0, upper=1.0)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 6), st.integers(0, 10_000))
def test_labelled_filter_agrees_with_the_positional_one(group_size: int, seed: int):
    """Labels that number consecutive runs of `group_size` give the positional filter's mask, in any order."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 2, (4 * group_size,), generator=g).float()
    labels = torch.arange(4).repeat_interleave(group_size)
    perm = torch.randperm(len(scores), generator=g)
    expected = group_reward_filter(scores, group_size=group_size, lower=0.1, upper=0.9)
    got = labelled_reward_filter(scores[perm], labels[perm], 4, lower=0.1, upper=0.9)
    assert torch.equal(got, expected[perm])


def test_labelled_filter_over_two_processes_uses_every_trajectory():
    """With `all_reduce` a group's mean is over both halves: each half alone would keep label 0's one success."""
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    labels = torch.tensor([0, 1, 0, 0, 1, 0])
    halves = [(scores[:3], labels[:3]), (scores[3:], labels[3:])]
    total = sum(
        torch.stack(
            [
                torch.zeros(2, dtype=torch.float64).index_add_(0, lab, sc.double()),
                torch.zeros(2, dtype=torch.float64).index_add_(0, lab, torch.ones(3, dtype=torch.float64)),
            ]
        )
        for sc, lab in halves
    )
    keeps = [
        labelled_reward_filter(sc, lab, 2, lower=0.3, upper=1.0, all_reduce=lambda t: total)
        for sc, lab in halves
    ]
    assert not torch.cat(keeps).any()  # label 0: mean 1/4 < 0.3; label 1: mean 0
    assert labelled_reward_filter(scores[:3], labels[:3], 2, lower=0.3, upper=1.0).tolist() == [
        True,
        False,
        True,
    ]
    with pytest.raises(ValueError, match=r"`groups` must lie in \[0, num_groups=2\)"):
        labelled_reward_filter(scores, labels + 1, 2, lower=0.0, upper=1.0)


def test_first_episode_mask_and_scores():
    done = torch.tensor([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 0, 0]], dtype=torch.bool)
    rewards = torch.arange(12, dtype=torch.float32).view(4, 3)
    mask = first_episode_mask(done)
    expected = torch.tensor([[1, 1, 1], [1, 1, 1], [0, 1, 1], [0, 0, 1]], dtype=torch.bool)
    assert torch.equal(mask, expected)
    torch.testing.assert_close(
        first_episode_scores(rewards, done), torch.tensor([0.0 + 3, 1 + 4 + 7, 2 + 5 + 8 + 11])
    )


def test_discounted_scores_rank_a_group_of_successes_by_speed():
    """gamma < 1: a sparse success reward earlier in the episode scores higher; gamma = 1 is the plain sum."""
    t = 6
    done = torch.zeros(t, 3, dtype=torch.bool)
    rewards = torch.zeros(t, 3)
    for col, step in enumerate((1, 4)):  # two successes, at decisions 1 and 4
        done[step, col], rewards[step, col] = True, 1.0
    rewards[2, 2] = 0.5  # a column that never ends: every step counts
    torch.testing.assert_close(
        first_episode_scores(rewards, done, gamma=0.9), torch.tensor([0.9, 0.9**4, 0.5 * 0.81])
    )
    torch.testing.assert_close(first_episode_scores(rewards, done), torch.tensor([1.0, 1.0, 0.5]))
    advantages = compute_grpo_advantages(
        first_episode_scores(rewards[:, :2], done[:, :2], gamma=0.9), group_size=2
    )
    assert advantages[0] > 0 > advantages[1]  # the faster success is preferred
    with pytest.raises(ValueError, match="gamma must be in"):
        first_episode_scores(rewards, done, gamma=0.0)
