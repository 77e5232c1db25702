"""The gymnasium example learns on several seeds, beyond the noise (`long`: minutes on 2 cores; the CartPole PPO
run is in the default suite, the side-by-side comparison with SB3 on CartPole, Pendulum and Hopper is
benchmarks/algos_vs_sb3.py):

- PPO on Pendulum-v1 (a `Box` action, time-limit truncation every 200 steps) with the RL Zoo's settings;
- GRPO on CartPole-v1: groups of envs from one seeded start, group-relative episode scores, no critic.

Each seed's held-out return (starts no training env used) is compared with that of the untrained network of the
same seed: with greedy actions for PPO, with sampled actions for GRPO (the greedy action of an untrained CartPole
network, nearly equal logits, can balance for hundreds of steps by luck; its samples do not).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.long
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ppo_gymnasium.py"
HELD_OUT = list(range(10_000, 10_010))


@pytest.fixture(scope="module", name="ex")
def _example() -> Any:
    spec = importlib.util.spec_from_file_location("ppo_gymnasium", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ppo_gymnasium"] = module
    spec.loader.exec_module(module)
    return module


def sampling_actor(agent: Any, seed: int) -> Any:
    """``obs -> actions`` drawn from the policy (a fixed RNG: the same draws before and after training)."""
    g = torch.Generator().manual_seed(seed)

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        probs = agent.distribution(torch.as_tensor(obs)).probs
        return torch.multinomial(probs, 1, generator=g).squeeze(-1).numpy()

    return act


def held_out_before_and_after(ex: Any, args: Any, *, sampled: bool = False) -> tuple[float, float]:
    envs = ex.make_envs(args)
    torch.manual_seed(args.seed)  # the untrained network `train` starts from
    untrained = ex.ActorCritic(
        envs.single_observation_space.shape[0],
        envs.single_action_space,
        hidden_sizes=args.hidden_sizes,
        activation=args.activation,
        ortho_init=args.ortho_init,
        log_std_init=args.log_std_init,
    )

    def actor(agent: Any) -> Any:
        return sampling_actor(agent, args.seed) if sampled else ex.greedy_actor(agent)

    before = np.mean(ex.evaluate(actor(untrained), args, HELD_OUT))
    result = ex.train(args, log=None)
    after = np.mean(ex.evaluate(actor(result.agent), args, HELD_OUT, result.obs_normalizer))
    return float(before), float(after)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_learns_pendulum(ex, seed):
    # hyperparams/ppo.yml "Pendulum-v1" of the RL Baselines3 Zoo, without its gSDE exploration
    args = ex.Args(
        env_id="Pendulum-v1",
        seed=seed,
        total_steps=100_000,
        num_envs=4,
        num_steps=1024,
        batch_size=64,
        update_epoch=10,
        gamma=0.9,
        gae_lambda=0.95,
        learning_rate=1e-3,
        value_loss_coef=1.0,
    )
    before, after = held_out_before_and_after(ex, args)
    # untrained: about -1200 (the pendulum hangs down); swung up and held: above -400
    assert after > -400 and after > before + 500, (before, after)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grpo_learns_cartpole(ex, seed):
    args = ex.Args(
        env_id="CartPole-v1",
        seed=seed,
        adv_type="grpo",
        loss_type="actor",
        group_size=8,
        num_envs=32,
        num_steps=500,
        batch_size=1024,
        update_epoch=4,
        learning_rate=1e-3,
        whiten_advantages="none",
        total_steps=60_000,
    )
    before, after = held_out_before_and_after(ex, args, sampled=True)
    # untrained: about 20 steps balanced; the limit is 500
    assert after > before + 100, (before, after)
