"""The gymnasium example (examples/ppo_gymnasium.py) against Stable-Baselines3's PPO, its oracle:

- one rollout is the same rollout: from the same weights, env seeds and torch RNG state, the example's collection
  and its vla_algos advantages reproduce SB3's rollout buffer (observations, actions, log-probs, values, advantages
  and returns, time-limit truncation bootstrapped from the final observation's value included);
- one update is the same update: given SB3's rollout buffer, the same weights and SB3's minibatch order, the example's
  update (vla_algos' loss, registry looked up) leaves the weights where `PPO.train()` leaves them.

SB3 is a test dependency (requirements-dev.txt); the tests skip without it (and fail under VLA_REQUIRE_ALL=1).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

sb3 = pytest.importorskip("stable_baselines3")
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.logger import Logger  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ppo_gymnasium.py"


@pytest.fixture(scope="module", name="ex")
def _example() -> Any:
    spec = importlib.util.spec_from_file_location("ppo_gymnasium", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ppo_gymnasium"] = module
    spec.loader.exec_module(module)
    return module


# SB3 parameter name -> the example's (the same layer in the same place of the same MLPs)
WEIGHT_NAMES = {
    "mlp_extractor.policy_net.0": "pi_body.0",
    "mlp_extractor.policy_net.2": "pi_body.2",
    "mlp_extractor.value_net.0": "vf_body.0",
    "mlp_extractor.value_net.2": "vf_body.2",
    "action_net": "action_head",
    "value_net": "value_head",
}


def example_name(sb3_name: str) -> str:
    for old, new in WEIGHT_NAMES.items():
        if sb3_name.startswith(old + "."):
            return new + sb3_name[len(old) :]
    return sb3_name  # log_std


def sb3_weights(model: PPO) -> dict[str, torch.Tensor]:
    return {example_name(k): v.detach().clone() for k, v in model.policy.state_dict().items()}


def make_pair(ex: Any, env_id: str, *, n_envs: int, seed: int = 0, **ppo: Any) -> tuple[PPO, Any, Any]:
    """SB3's PPO and the example's agent (SB3's weights copied in) with the example's `Args` for the same settings."""
    torch.set_num_threads(1)
    model = PPO(
        "MlpPolicy", DummyVecEnv([ex.make_env(env_id)] * n_envs), seed=seed, device="cpu", verbose=0, **ppo
    )
    # SB3's default logger writes an empty /tmp/SB3-<date> folder per model
    model.set_logger(Logger(folder=None, output_formats=[]))
    args = ex.Args(
        env_id=env_id,
        seed=seed,
        num_envs=n_envs,
        num_steps=model.n_steps,
        batch_size=model.batch_size,
        update_epoch=model.n_epochs,
        learning_rate=model.learning_rate,
        max_grad_norm=model.max_grad_norm,
        target_kl=model.target_kl,
        gamma=model.gamma,
        gae_lambda=model.gae_lambda,
        whiten_advantages="minibatch" if model.normalize_advantage else "none",
        clip_ratio_low=ppo.get("clip_range", 0.2),
        clip_ratio_high=ppo.get("clip_range", 0.2),
        value_clip=ppo.get("clip_range_vf"),
        value_clip_mode="clipped",
        value_loss_coef=2.0 * model.vf_coef,
        entropy_bonus=model.ent_coef,
    )
    envs = ex.make_envs(args)
    agent = ex.ActorCritic(
        int(np.prod(envs.single_observation_space.shape)),
        envs.single_action_space,
        hidden_sizes=args.hidden_sizes,
        activation=args.activation,
        ortho_init=args.ortho_init,
        log_std_init=args.log_std_init,
    )
    agent.load_state_dict(sb3_weights(model))
    return model, agent, args


def sb3_rollout(model: PPO, rng_seed: int) -> dict[str, np.ndarray]:
    """Collect one rollout with SB3 (its buffer's arrays, `[T, B, ...]`, copied before `train()` flattens them)."""
    total, callback = model._setup_learn(model.n_steps * model.n_envs, callback=None)
    torch.manual_seed(rng_seed)
    model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=model.n_steps)
    model._update_current_progress_remaining(model.num_timesteps, total)
    b = model.rollout_buffer
    keys = (
        "observations",
        "actions",
        "rewards",
        "episode_starts",
        "values",
        "log_probs",
        "advantages",
        "returns",
    )
    out = {k: getattr(b, k).copy() for k in keys}
    out["last_dones"] = np.asarray(model._last_episode_starts, dtype=bool)
    return out


CASES = {  # (env, n_envs, PPO settings): a rollout of Pendulum-v1 longer than its 200-step time limit truncates
    "cartpole": ("CartPole-v1", 4, dict(n_steps=64, batch_size=64, n_epochs=3)),
    "pendulum_truncated": ("Pendulum-v1", 2, dict(n_steps=256, batch_size=128, n_epochs=2, gamma=0.95)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_rollout_is_sb3s_rollout(ex, case):
    env_id, n_envs, ppo = CASES[case]
    model, agent, args = make_pair(ex, env_id, n_envs=n_envs, **ppo)
    ref = sb3_rollout(model, rng_seed=123)

    envs = ex.make_envs(args)
    obs, _ = envs.reset(seed=args.seed)
    buf = ex.Rollout.empty(args.num_steps, n_envs, obs.shape[1], envs.single_action_space)
    torch.manual_seed(123)
    ex.collect(
        envs,
        agent,
        buf,
        obs,
        needs_values=True,
        first_episodes_only=False,
        episodes=ex.EpisodeLog(),
        global_step=0,
    )
    batch = ex.advantages(buf, args)
    if case == "pendulum_truncated":
        assert buf.truncated.any() and not buf.terminated.any()

    t, b = args.num_steps, n_envs
    np.testing.assert_array_equal(buf.obs, ref["observations"])
    actions = buf.actions.reshape(t, b, -1).astype(np.float32)
    np.testing.assert_array_equal(actions, ref["actions"].reshape(t, b, -1))
    np.testing.assert_allclose(buf.logprobs.sum((-2, -1)), ref["log_probs"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(buf.values, ref["values"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(batch.advantages.reshape(t, b).numpy(), ref["advantages"], rtol=0, atol=1e-4)
    np.testing.assert_allclose(batch.returns.reshape(t, b).numpy(), ref["returns"], rtol=0, atol=1e-4)


UPDATE_CASES = {
    "cartpole_sb3_defaults": ("CartPole-v1", 4, dict(n_steps=64, batch_size=64, n_epochs=3)),
    "cartpole_entropy_no_whitening": (
        "CartPole-v1",
        4,
        dict(n_steps=64, batch_size=32, n_epochs=2, ent_coef=0.05, normalize_advantage=False),
    ),
    "cartpole_value_clip": (
        "CartPole-v1",
        4,
        dict(n_steps=64, batch_size=64, n_epochs=4, clip_range_vf=0.05),
    ),
    "cartpole_target_kl": (
        "CartPole-v1",
        4,
        dict(n_steps=64, batch_size=16, n_epochs=10, learning_rate=3e-3, target_kl=0.002),
    ),
    "pendulum_box": (
        "Pendulum-v1",
        2,
        dict(n_steps=128, batch_size=64, n_epochs=3, ent_coef=0.01, clip_range=0.1),
    ),
}


@pytest.mark.parametrize("case", list(UPDATE_CASES))
def test_one_update_is_sb3s_update(ex, case):
    env_id, n_envs, ppo = UPDATE_CASES[case]
    model, agent, args = make_pair(ex, env_id, n_envs=n_envs, **ppo)
    ref = sb3_rollout(model, rng_seed=0)
    t, b = args.num_steps, n_envs

    # SB3's rollout as the example's batch (time-major samples t * B + b); SB3's log-probs are already summed over
    # the action's dimensions, one entry per action
    def flat(x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x).reshape(t * b, *x.shape[2:])

    continuous = agent.continuous
    batch = ex.Batch(
        obs=flat(ref["observations"]),
        actions=flat(ref["actions"]) if continuous else flat(ref["actions"]).reshape(-1).long(),
        logprobs=flat(ref["log_probs"])[:, None, None],
        values=flat(ref["values"]),
        advantages=flat(ref["advantages"]),
        returns=flat(ref["returns"]),
        sample_weight=None,
        loss_mask=torch.ones(t * b, dtype=torch.bool),
    )
    # SB3's minibatch order: one np.random.permutation per epoch over its env-major samples (env * T + t)
    np.random.seed(7)
    perms = [np.random.permutation(t * b) for _ in range(args.update_epoch)]
    to_time_major = lambda i: (i % t) * b + i // t  # noqa: E731
    minibatches = [
        [torch.as_tensor(to_time_major(p[i : i + args.batch_size])) for i in range(0, t * b, args.batch_size)]
        for p in perms
    ]
    optimizer = ex.make_optimizer(agent, args)
    before = {k: v.clone() for k, v in agent.state_dict().items()}

    np.random.seed(7)
    model.train()
    ex.update(agent, optimizer, batch, minibatches, args)

    if model.target_kl is not None:  # the case stops early: SB3 counts the epochs it began
        assert model._n_updates < args.update_epoch
    after_sb3, after_ex = sb3_weights(model), agent.state_dict()
    assert set(after_sb3) == set(after_ex)
    moved = max(float((after_ex[k] - before[k]).abs().max()) for k in after_ex)
    assert moved > 1e-4, "the update did not move the weights: nothing compared"
    for k in after_ex:
        torch.testing.assert_close(
            after_ex[k], after_sb3[k], rtol=1e-5, atol=1e-6, msg=lambda m, k=k: f"{k}: {m}"
        )
