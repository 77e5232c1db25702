"""Every registered model family's policy satisfies `vla_models.Policy`, the protocol apps type against: it has
each member, and each of the protocol's own methods takes the protocol's arguments (same names, kinds and
optional ones optional)."""

from __future__ import annotations

import inspect

import pytest
from torch import nn

from vla_models import Policy, build_policy, config_from_dict, family_names

# the protocol's own methods (the rest are nn.Module's)
POLICY_METHODS = ("predict", "evaluate", "values", "sft_loss", "set_global_step", "save_pretrained")


def _accepts(protocol_fn: object, policy_fn: object) -> list[str]:
    """The protocol parameters `policy_fn` does not take as the protocol declares them."""
    theirs = inspect.signature(policy_fn).parameters  # bound method: no `self`
    problems = []
    for name, p in list(inspect.signature(protocol_fn).parameters.items())[1:]:
        q = theirs.get(name)
        if q is None:
            problems.append(f"{name}: missing")
        elif q.kind != p.kind:
            problems.append(f"{name}: {q.kind.description}, the protocol says {p.kind.description}")
        elif p.default is not inspect.Parameter.empty and q.default is inspect.Parameter.empty:
            problems.append(f"{name}: required, the protocol's is optional")
    required = [
        n
        for n, q in theirs.items()
        if q.default is inspect.Parameter.empty and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD)
    ]
    problems += [
        f"{n}: required, not in the protocol"
        for n in required
        if n not in inspect.signature(protocol_fn).parameters
    ]
    return problems


@pytest.mark.parametrize("family", family_names())
def test_the_tiny_policy_of_every_family_is_a_policy(family: str) -> None:
    policy = build_policy(config_from_dict({"model_type": family, "size": "tiny"}))
    assert isinstance(policy, nn.Module)
    assert isinstance(policy, Policy)
    for name in POLICY_METHODS:
        assert _accepts(getattr(Policy, name), getattr(policy, name)) == [], f"{family}.{name}"


def test_an_object_without_the_methods_is_not_a_policy() -> None:
    assert not isinstance(nn.Linear(2, 2), Policy)


def test_a_method_that_takes_other_arguments_is_found() -> None:
    class Narrow:
        def predict(self, obs, mode="sample"):  # no temperature, top_k, generator; mode positional
            ...

    problems = _accepts(Policy.predict, Narrow().predict)
    assert problems[0] == "mode: positional or keyword, the protocol says keyword-only"
    assert {p.split(":")[0] for p in problems[1:]} == {"temperature", "top_k", "generator"}
