"""An advantage estimator and a policy loss registered in vla_algos work through the app without touching it: its
config validation accepts the new names and checks them by their registered properties, and a real tiny training
iteration (MetaWorld, the tiny OpenVLA-OFT, the local backend) runs with them. Each test undoes its registrations."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from train_embodied.config import ConfigError, load_train_config
from train_embodied.testing import GRPO_TINY, read_metrics, run_train
from vla_algos import (
    ADVANTAGE_ESTIMATORS,
    POLICY_LOSSES,
    EstimatedAdvantages,
    LossInputs,
    LossSettings,
    WeightSums,
    actor_loss,
    chunk_done,
    first_episode_mask,
    first_episode_scores,
    register_advantage_estimator,
    register_policy_loss,
)

GRPO = "metaworld_grpo_tiny_cpu"


class Calls:
    """What the registered functions saw, so the test knows the run went through them."""

    def __init__(self) -> None:
        self.estimator: list[dict[str, Any]] = []
        self.loss = 0
        self.loss_callers: list[
            str
        ] = []  # the app's functions on the stack of the loss's first call, outermost first


def group_baseline_estimator(calls: Calls):
    """REINFORCE with a group baseline: each env's first-episode return minus its same-start group's mean return
    (not divided by the group's std, unlike GRPO); every decision of that episode gets it."""

    def estimate(
        *,
        rewards: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        loss_mask: torch.Tensor,
        group_size: int,
        **unused: Any,
    ) -> EstimatedAdvantages:
        done = chunk_done(terminated, truncated)
        scores = first_episode_scores(rewards.sum(-1), done)
        groups = scores.view(-1, group_size)
        advantages = (groups - groups.mean(1, keepdim=True)).reshape(-1)
        mask = first_episode_mask(done) & loss_mask
        calls.estimator.append({"group_size": group_size, "rows": rewards.shape[1]})
        return EstimatedAdvantages(
            advantages=advantages[None, :].expand_as(mask).clone(),
            returns=None,
            loss_mask=mask,
            stats={"baseline_returns_mean": float(scores.mean())},
        )

    return estimate


def reinforce_loss(calls: Calls):
    """REINFORCE: the unclipped ratio times the advantage (at the rollout's own weights, its gradient is
    advantage x grad log-prob), with the entropy bonus and KL term of `actor_loss`; no value term."""

    def loss(
        inputs: LossInputs, settings: LossSettings, weight_sums: WeightSums | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if calls.loss == 0:
            calls.loss_callers = [
                f.function
                for f in reversed(inspect.stack())
                if f.frame.f_globals.get("__name__", "").startswith("train_embodied")
            ]
        calls.loss += 1
        unclipped = dataclasses.replace(
            settings, clip_ratio_low=1.0 - 1e-6, clip_ratio_high=1.0e6, clip_ratio_c=None
        )
        value, metrics = actor_loss(inputs, unclipped, weight_sums)
        metrics["actor/reinforce_calls"] = torch.tensor(1.0)
        return value, metrics

    return loss


@pytest.fixture
def registered() -> Iterator[Calls]:
    """`group_baseline` (grouped starts, no critic), `mc_with_critic` (needs values) and `reinforce` (no value term),
    registered for the test and removed after it."""
    calls = Calls()
    register_advantage_estimator(
        "group_baseline", group_baseline_estimator(calls), grouped_starts=True, episode_scores=True
    )
    register_advantage_estimator("mc_with_critic", group_baseline_estimator(calls), needs_values=True)
    register_policy_loss("reinforce", reinforce_loss(calls))
    try:
        yield calls
    finally:
        for name in ("group_baseline", "mc_with_critic"):
            ADVANTAGE_ESTIMATORS.pop(name, None)
        POLICY_LOSSES.pop("reinforce", None)


def _errors(overrides: list[str], config: str = GRPO) -> list[str]:
    with pytest.raises(ConfigError) as err:
        load_train_config(config, overrides, check_paths=False)
    return err.value.errors


def test_config_checks_a_registered_estimator_and_loss_by_their_properties(registered: Calls) -> None:
    tc = load_train_config(
        GRPO, ["algorithm.adv_type=group_baseline", "algorithm.loss_type=reinforce"], check_paths=False
    )
    assert (tc.algorithm.adv_type, tc.algorithm.loss_type) == ("group_baseline", "reinforce")
    assert tc.env_train.group_size == tc.algorithm.group_size == 4
    new = ["algorithm.adv_type=group_baseline", "algorithm.loss_type=reinforce"]
    # grouped starts: groups of >= 2 envs, one episode per env, whole groups per pipeline stage
    assert _errors([*new, "algorithm.group_size=1"]) == [
        "algorithm.group_size=1 is invalid with algorithm.adv_type='group_baseline': a group-relative estimator "
        "needs groups of >= 2 envs"
    ]
    assert _errors([*new, "env.train.auto_reset=true"]) == [
        "env.train.auto_reset=True is invalid with algorithm.adv_type='group_baseline': a group score is one "
        "episode per env: set `env.train.auto_reset=false`"
    ]
    assert _errors([*new, "rollout.pipeline_stage_num=8"]) == [
        "env.train.num_envs=16 is invalid with rollout.pipeline_stage_num=8: each pipeline stage needs the same "
        "number of envs (and whole groups of algorithm.group_size=4 with algorithm.adv_type='group_baseline')"
    ]
    # episode scores: a discounted score needs gamma > 0
    assert _errors([*new, "algorithm.gamma=0"])[0].startswith(
        "algorithm.gamma=0.0 is invalid with algorithm.adv_type='group_baseline' and algorithm.discount_scores=true"
    )
    # an estimator that needs the critic's values needs a loss with a value term; a loss without one needs no head
    assert _errors(
        [
            "algorithm.adv_type=mc_with_critic",
            "algorithm.loss_type=reinforce",
            "algorithm.filter_rewards=false",
        ]
    ) == [
        "algorithm.loss_type='reinforce' is invalid with algorithm.adv_type='mc_with_critic': that estimator uses "
        "the critic's values, which only a loss with a value term trains (loss_type actor_critic)"
    ]
    assert _errors(["algorithm.loss_type=actor_critic"]) == [
        "actor.model.add_value_head=False is invalid with algorithm.loss_type='actor_critic': the critic is the "
        "value head: set `actor.model.add_value_head=true`, or algorithm.loss_type to a loss without a value term "
        "(actor, reinforce)"
    ]
    # the critic warm-up needs a value term
    assert _errors([*new, "algorithm.critic_warmup_epochs=1"]) == [
        "algorithm.critic_warmup_epochs=1 needs a critic: set `algorithm.critic_warmup_epochs=0`, or "
        "algorithm.loss_type to a loss with a value term (actor_critic)"
    ]
    # the allowed values named in a message are the registered ones
    assert _errors(["algorithm.adv_type=gea"]) == [
        "algorithm.adv_type='gea' is not one of: gae, grpo, group_baseline, mc_with_critic"
    ]


def test_unregistered_names_are_refused_again() -> None:
    assert _errors(["algorithm.adv_type=group_baseline", "algorithm.loss_type=reinforce"]) == [
        "algorithm.adv_type='group_baseline' is not one of: gae, grpo",
        "algorithm.loss_type='reinforce' is not one of: actor_critic, actor",
    ]


@pytest.mark.slow
def test_a_registered_estimator_and_loss_train_a_real_iteration(registered: Calls, tmp_path: Path) -> None:
    """One GRPO-sized iteration (4 envs in groups of 2, update_epoch 1) with the estimator and loss registered
    above: the app calls them (the estimator with the configured groups) and logs their metrics."""
    pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")
    overrides = [
        *GRPO_TINY,
        "algorithm.adv_type=group_baseline",
        "algorithm.loss_type=reinforce",
        "algorithm.update_epoch=1",
        "runner.max_epochs=1",
        "runner.eval_before_train=false",
        "runner.eval_after_train=false",
    ]
    summary = run_train(GRPO, overrides, tmp_path / "run")
    assert summary["algorithm"] == "group_baseline" and summary["epochs"] == 1
    assert registered.estimator == [{"group_size": 2, "rows": 4}]
    assert registered.loss >= 1
    # from the runner's `iteration()` to the registered loss: 5 calls, each a step of the update. The driver's two
    # (`iteration` -> `_update` -> the actor group) are read from the runner's code; the actor's three from the
    # stack of the loss's first call, which runs on the worker's own thread (the worker group's dispatch between
    # the driver and the actor is vla_infra's, not the app's)
    from train_embodied import runner

    assert "_update(t, batch, i)" in inspect.getsource(runner.iteration)  # runner: one training iteration
    # the update, handed to the actor
    assert "t.w.actor.train_on_rollout(" in inspect.getsource(runner._update)
    callers = registered.loss_callers
    assert callers[callers.index("train_on_rollout") :] == [
        "train_on_rollout",  # actor worker: advantages of this rank's rows, then its training
        "train",  # actor worker: the update on this worker's device and threads
        "ppo_update",  # update: epochs of minibatches, micro-batches, the loss, the optimizer step
    ]
    (row,) = [r for r in read_metrics(tmp_path / "run") if "train/actor/policy_loss" in r]
    assert "rollout/baseline_returns_mean" in row and "train/actor/reinforce_calls" in row
    assert not any(key.startswith("train/critic/") for key in row)
