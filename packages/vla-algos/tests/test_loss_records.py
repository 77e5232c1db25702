"""The loss's records: `LossSettings` under the config's names, `LossInputs` reduced to the settings' levels inside
the loss, and `minibatch_weight_sums` from the masks alone."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
import torch

from vla_algos import (
    LossInputs,
    LossSettings,
    WeightSums,
    advantages_per_ratio,
    entry_weights,
    get_policy_loss,
    minibatch_weight_sums,
    reduce_logprobs,
    total_weight,
)


def test_from_config_reads_every_field_by_name_and_refuses_a_missing_one() -> None:
    values = {f.name: f.default for f in dataclasses.fields(LossSettings)}
    values.update(clip_ratio_high=0.28, entropy_bonus=0.01, kl_beta=0.1, logprob_type="chunk_level")
    config = argparse.Namespace(**values, gamma=0.99)  # other attributes are ignored
    assert LossSettings.from_config(config) == LossSettings(
        clip_ratio_high=0.28, entropy_bonus=0.01, kl_beta=0.1, logprob_type="chunk_level"
    )
    assert LossSettings.from_config({**values, "gamma": 0.99}) == LossSettings.from_config(config)
    del values["kl_beta"], values["value_clip"]
    with pytest.raises(ValueError, match="the config has no kl_beta, value_clip"):
        LossSettings.from_config(values)


def _inputs(g: torch.Generator, n: int = 6, c: int = 2, a: int = 3) -> LossInputs:
    logprobs = torch.randn(n, c, a, generator=g, dtype=torch.float64)
    action_mask = torch.rand(n, c, generator=g) < 0.7
    action_mask[:, 0] = True
    return LossInputs(
        logprobs=logprobs.requires_grad_(),
        old_logprobs=logprobs.detach() + 0.2 * torch.randn(n, c, a, generator=g, dtype=torch.float64),
        advantages=torch.randn(n, c, generator=g, dtype=torch.float64) * action_mask,
        sample_weight=torch.rand(n, generator=g, dtype=torch.float64) + 0.1,
        action_mask=action_mask,
        entropy=torch.rand(n, c, a, generator=g, dtype=torch.float64),
        ref_logprobs=logprobs.detach() + 0.3 * torch.randn(n, c, a, generator=g, dtype=torch.float64),
        values=torch.randn(n, generator=g, dtype=torch.float64),
        old_values=torch.randn(n, generator=g, dtype=torch.float64),
        returns=torch.randn(n, generator=g, dtype=torch.float64),
    )


@pytest.mark.parametrize("logprob_type", ["token_level", "action_level", "chunk_level"])
@pytest.mark.parametrize("entropy_type", ["token_level", "chunk_level"])
def test_the_loss_reduces_to_the_settings_levels(logprob_type: str, entropy_type: str) -> None:
    """Token-level inputs with `logprob_type` / `entropy_type` give the loss of the same entries reduced beforehand
    and taken as they are, with the masks and advantages of the reduced shape; `minibatch_weight_sums` gives the
    `total_weight` of those masks."""
    g = torch.Generator().manual_seed(0)
    x = _inputs(g)
    settings = LossSettings(
        entropy_bonus=0.1, kl_beta=0.5, logprob_type=logprob_type, entropy_type=entropy_type
    )
    sums = minibatch_weight_sums(
        settings, x.logprobs.shape, sample_weight=x.sample_weight, action_mask=x.action_mask
    )
    loss, metrics = get_policy_loss("actor_critic")(x, settings, sums)

    lp = reduce_logprobs(x.logprobs, logprob_type)
    ent = reduce_logprobs(x.entropy, entropy_type)
    mask = entry_weights(x.sample_weight, x.action_mask, ndim=lp.ndim)
    entropy_mask = entry_weights(None, x.action_mask, ndim=ent.ndim)
    assert sums == WeightSums(
        policy=float(total_weight(mask, lp.shape)),
        entropy=float(total_weight(entropy_mask, ent.shape)),
        value=6.0,
    )
    # the same entries reduced here: token level is taken as it is; the masks carry the reduced levels' weights
    reduced = LossInputs(
        logprobs=lp,
        old_logprobs=reduce_logprobs(x.old_logprobs, logprob_type),
        advantages=advantages_per_ratio(x.advantages, lp.ndim, x.action_mask),
        sample_weight=x.sample_weight,
        action_mask=x.action_mask,
        entropy=ent,
        ref_logprobs=reduce_logprobs(x.ref_logprobs, logprob_type),
        values=x.values,
        old_values=x.old_values,
        returns=x.returns,
    )
    token = dataclasses.replace(settings, logprob_type="token_level", entropy_type="token_level")
    want, want_metrics = get_policy_loss("actor_critic")(reduced, token, sums)
    torch.testing.assert_close(loss, want)
    assert metrics.keys() == want_metrics.keys()
    for k, v in want_metrics.items():
        torch.testing.assert_close(metrics[k], v, equal_nan=True, msg=k)
    loss.backward()
    assert x.logprobs.grad is not None and bool((x.logprobs.grad != 0).any())


def test_weight_sums_of_none_are_the_calls_own_masked_means() -> None:
    g = torch.Generator().manual_seed(1)
    x = _inputs(g)
    settings = LossSettings(entropy_bonus=0.1, kl_beta=0.5, logprob_type="action_level")
    own = minibatch_weight_sums(
        settings, x.logprobs.shape, sample_weight=x.sample_weight, action_mask=x.action_mask
    )
    a, ma = get_policy_loss("actor_critic")(x, settings)
    b, mb = get_policy_loss("actor_critic")(x, settings, own)
    torch.testing.assert_close(a, b)
    assert ma.keys() == mb.keys()


def test_levels_other_than_token_need_token_log_probs() -> None:
    with pytest.raises(ValueError, match=r"a chunk_level ratio needs token log-probs of shape \[n, C, A\]"):
        minibatch_weight_sums(LossSettings(logprob_type="chunk_level"), (6,))
    with pytest.raises(ValueError, match="unknown level 'sequence'"):
        minibatch_weight_sums(LossSettings(logprob_type="sequence"), (6, 1, 1))
