"""PPO (and GRPO) on any gymnasium task with ``vla_algos``: one file, one loop, the loss in plain sight.

    pip install packages/vla-algos gymnasium          # torch installed first (the CPU build is enough)
    python packages/vla-algos/examples/ppo_gymnasium.py --env-id CartPole-v1 --total-steps 100000 \\
        --num-envs 8 --num-steps 32 --batch-size 256 --update-epoch 20 --gamma 0.98 --gae-lambda 0.8 \\
        --learning-rate 1e-3 --anneal-lr --anneal-clip
    # GRPO: groups of 8 envs reset to one seeded start, one episode each, no critic
    python packages/vla-algos/examples/ppo_gymnasium.py --env-id CartPole-v1 --adv-type grpo --loss-type actor \\
        --group-size 8 --num-envs 32 --num-steps 500 --batch-size 1024 --whiten-advantages none

This file holds what a project owns: the network (an MLP actor and an MLP critic), the rollout buffer and the
loop. Every piece of RL arithmetic comes from ``vla_algos``, looked up by the names a config uses: the advantage
estimator (``adv_type``: ``gae``, ``grpo``), the loss (``loss_type``: ``actor_critic``, ``actor``), how the loss
entries weigh (``loss_agg_mode``), and inside the loss the clipped ratio, value clipping, the entropy bonus and the
KL penalty. The loop asks the looked-up entries what they need (``needs_values``, ``grouped_starts``,
``uses_critic``) and never branches on a name, so a registered estimator or loss runs here unchanged.

The defaults are Stable-Baselines3's PPO defaults, in ``vla_algos``' terms: SB3's ``vf_coef * mse`` is
``value_loss_coef * 0.5 * (V - R)**2`` here (``value_loss_coef = 2 * vf_coef``), SB3 whitens the advantages of
each minibatch (``--whiten-advantages minibatch``), and SB3 clips the value prediction without the pessimistic
maximum (``--value-clip-mode clipped``).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from vla_algos import (
    VALUE_CLIP_MODES,
    LossInputs,
    LossSettings,
    get_advantage_estimator,
    get_policy_loss,
    masked_whiten,
    rollout_advantages,
)


@dataclass
class Args:
    """Every setting of a run; the command line has one ``--flag`` per field (``--env-id``, ``--no-ortho-init``)."""

    env_id: str = "CartPole-v1"
    seed: int = 0
    total_steps: int = 100_000  # env steps (all envs together); rounded up to whole rollouts
    num_envs: int = 1
    num_steps: int = 2048  # steps per env per rollout (GRPO: at most, it ends once every env's episode has)
    batch_size: int = 64  # samples per minibatch
    update_epoch: int = 10  # passes over the rollout per update
    learning_rate: float = 3e-4
    anneal_lr: bool = False  # learning rate decays linearly to 0 over the run (RL Zoo's `lin_`)
    anneal_clip: bool = False  # so do the policy's clip ratios
    max_grad_norm: float = 0.5
    target_kl: float | None = None  # stop the update when a minibatch's approx_kl exceeds 1.5 x this
    # the RL arithmetic, by registered name (vla_algos)
    adv_type: str = "gae"
    loss_type: str = "actor_critic"
    loss_agg_mode: str = "token-mean"
    logprob_type: str = "action_level"  # a ratio per action (dims' log-probs summed); token_level: per dim
    entropy_type: str = "action_level"  # the entropy of the action, or the mean of its dims' (token_level)
    gamma: float = 0.99
    gae_lambda: float = 0.95
    group_size: int = 1  # envs per group that share a start (grouped-starts estimators: GRPO)
    whiten_advantages: str = "minibatch"  # minibatch (SB3), rollout (vla-train) or none
    # the loss's settings (vla_algos.LossSettings, the same names)
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float | None = None  # dual clip
    clip_log_ratio_min: float | None = None
    clip_log_ratio_max: float | None = None
    value_clip: float | None = None
    value_clip_mode: str = "clipped"  # clipped (SB3: the clipped prediction's error) or pessimistic
    huber_delta: float | None = None
    value_loss_coef: float = 1.0  # x 0.5 * (V - R)**2
    entropy_bonus: float = 0.0
    kl_beta: float = 0.0  # weight of the KL penalty to the initial policy (a frozen copy)
    kl_penalty: str = "k3"
    # the network and the env
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    ortho_init: bool = True
    log_std_init: float = 0.0
    normalize_env: bool = False  # observations and rewards by running statistics, clipped to +-10 (Zoo)
    torch_threads: int = 1


# ---------------------------------------------------------------------------------------------- env and network


def make_env(env_id: str, *, normalize: bool = False, gamma: float = 0.99) -> Callable[[], gym.Env]:
    """A constructor of one env: episode statistics of the raw rewards, then (``normalize``) observations and rewards
    scaled by running statistics and clipped to +-10, each copy its own statistics."""

    def thunk() -> gym.Env:
        env = gym.wrappers.RecordEpisodeStatistics(gym.make(env_id))
        if normalize:
            env = gym.wrappers.NormalizeObservation(env)
            env = gym.wrappers.TransformObservation(env, lambda o: np.clip(o, -10, 10), env.observation_space)
            env = gym.wrappers.NormalizeReward(env, gamma=gamma)
            env = gym.wrappers.TransformReward(env, lambda r: np.clip(r, -10, 10))
        return env

    return thunk


def make_envs(args: Args) -> gym.vector.SyncVectorEnv:
    """``num_envs`` copies; an episode that ends is reset in the same step (its last observation in the infos)."""
    thunk = make_env(args.env_id, normalize=args.normalize_env, gamma=args.gamma)
    return gym.vector.SyncVectorEnv(
        [thunk] * args.num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )


def mlp(sizes: Sequence[int], activation: type[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for n_in, n_out in itertools.pairwise(sizes):
        layers += [nn.Linear(n_in, n_out), activation()]
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """pi(a | s) and V(s), two MLPs (SB3's ``MlpPolicy`` layout): logits of a categorical for ``Discrete`` actions,
    the mean of a diagonal Gaussian with a state-independent log-std for ``Box`` actions.

    Log-probs and entropies come per action dimension, ``[n, 1, A]`` (a chunk of one action of ``A`` tokens, ``A = 1``
    for ``Discrete``), the granularity :func:`vla_algos.reduce_logprobs` reduces."""

    def __init__(
        self,
        obs_dim: int,
        action_space: gym.Space,
        *,
        hidden_sizes: Sequence[int],
        activation: str,
        ortho_init: bool,
        log_std_init: float,
    ) -> None:
        super().__init__()
        act = {"tanh": nn.Tanh, "relu": nn.ReLU}[activation]
        self.continuous = isinstance(action_space, gym.spaces.Box)
        n_out = int(np.prod(action_space.shape)) if self.continuous else int(action_space.n)
        last = hidden_sizes[-1] if hidden_sizes else obs_dim
        self.pi_body = mlp([obs_dim, *hidden_sizes], act)
        self.vf_body = mlp([obs_dim, *hidden_sizes], act)
        self.action_head = nn.Linear(last, n_out)
        self.value_head = nn.Linear(last, 1)
        self.log_std = nn.Parameter(torch.full((n_out,), log_std_init)) if self.continuous else None
        if ortho_init:  # orthogonal weights, zero biases; gains of OpenAI baselines (as SB3)
            for module, gain in (
                (self.pi_body, 2**0.5),
                (self.vf_body, 2**0.5),
                (self.action_head, 0.01),
                (self.value_head, 1.0),
            ):
                for layer in module.modules():
                    if isinstance(layer, nn.Linear):
                        nn.init.orthogonal_(layer.weight, gain=gain)
                        nn.init.zeros_(layer.bias)

    def distribution(self, obs: torch.Tensor) -> Distribution:
        out = self.action_head(self.pi_body(obs))
        if self.log_std is None:  # (the arguments are the network's own outputs: no validation needed)
            return Categorical(logits=out, validate_args=False)
        return Normal(out, self.log_std.exp().expand_as(out), validate_args=False)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``[n, D]`` -> ``[n]``."""
        return self.value_head(self.vf_body(obs)).squeeze(-1)

    def token_logprobs(self, dist: Distribution, actions: torch.Tensor) -> torch.Tensor:
        """``[n, 1, A]`` log-probs of ``actions`` (``[n, A]`` floats or ``[n]`` indices)."""
        lp = dist.log_prob(actions)
        return lp[:, None, :] if self.continuous else lp[:, None, None]

    def token_entropy(self, dist: Distribution) -> torch.Tensor:
        """``[n, 1, A]`` entropies per action dimension."""
        ent = dist.entropy()
        return ent[:, None, :] if self.continuous else ent[:, None, None]

    def act(self, obs: torch.Tensor, *, greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled (or most likely) actions ``[n, A]`` / ``[n]`` and their ``[n, 1, A]`` log-probs."""
        dist = self.distribution(obs)
        if greedy:
            actions = dist.mean if self.continuous else dist.probs.argmax(-1)
        else:  # a Gaussian's draw as loc + scale * noise (rsample), the same draw SB3 makes from the same RNG state
            actions = dist.rsample() if self.continuous else dist.sample()
        return actions, self.token_logprobs(dist, actions)

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probs and entropies ``[n, 1, A]`` of ``actions`` under the current policy, and ``V(obs)`` ``[n]``."""
        dist = self.distribution(obs)
        return self.token_logprobs(dist, actions), self.token_entropy(dist), self.value(obs)


# ---------------------------------------------------------------------------------------------- rollout buffer


@dataclass
class Rollout:
    """``num_steps`` steps of ``num_envs`` envs, time-major (``[T, B, ...]``) as :mod:`vla_algos.estimators` reads
    them: numpy arrays, cheap to write one step at a time, read as tensors without a copy (``torch.from_numpy``).
    ``final_values[t, b]``: V of the last observation of an episode that ended at step ``t`` (a truncated episode
    bootstraps from it). ``length``: the steps filled."""

    obs: np.ndarray  # float32 [T, B, D]
    actions: np.ndarray  # float32 [T, B, A] (Box) or int64 [T, B] (Discrete)
    logprobs: np.ndarray  # float32 [T, B, 1, A]: per action dimension
    values: np.ndarray  # float32 [T, B]
    rewards: np.ndarray  # float32 [T, B]
    terminated: np.ndarray  # bool [T, B]
    truncated: np.ndarray  # bool [T, B]
    final_values: np.ndarray  # float32 [T, B]
    last_values: np.ndarray  # float32 [B]: V of the observation after the last step
    length: int = 0

    @classmethod
    def empty(cls, num_steps: int, num_envs: int, obs_dim: int, action_space: gym.Space) -> Rollout:
        t, b, f4 = num_steps, num_envs, np.float32
        box = isinstance(action_space, gym.spaces.Box)
        a = int(np.prod(action_space.shape)) if box else 1
        return cls(
            obs=np.zeros((t, b, obs_dim), f4),
            actions=np.zeros((t, b, a), f4) if box else np.zeros((t, b), np.int64),
            logprobs=np.zeros((t, b, 1, a), f4),
            values=np.zeros((t, b), f4),
            rewards=np.zeros((t, b), f4),
            terminated=np.zeros((t, b), bool),
            truncated=np.zeros((t, b), bool),
            final_values=np.zeros((t, b), f4),
            last_values=np.zeros(b, f4),
        )


@dataclass
class Batch:
    """The rollout's samples, flattened time-major (sample ``t * B + b``), with their advantages and loss weights."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor  # [N, 1, A]
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor | None
    sample_weight: torch.Tensor | None  # loss_agg_mode weight of each sample, None: uniform
    loss_mask: torch.Tensor  # bool [N]: samples that enter the loss


@dataclass
class EpisodeLog:
    """Returns of finished training episodes (raw rewards) and the env step at which each ended."""

    steps: list[int] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)


def observe_final(
    agent: ActorCritic, buf: Rollout, t: int, info: dict[str, Any], needs_values: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Values of the last observations of episodes truncated at step ``t`` into ``buf.final_values[t]``; returns the
    finished episodes' env indices and raw returns."""
    trunc = info["_final_obs"] & buf.truncated[t]
    if needs_values and trunc.any():
        final = torch.from_numpy(np.stack(info["final_obs"][trunc]).astype(np.float32))
        buf.final_values[t, trunc] = agent.value(final).numpy()
    episodes = info["final_info"]
    return np.flatnonzero(episodes["_episode"]), episodes["episode"]["r"][episodes["_episode"]]


@torch.no_grad()
def collect(
    envs: gym.vector.VectorEnv,
    agent: ActorCritic,
    buf: Rollout,
    obs: np.ndarray,
    *,
    needs_values: bool,
    first_episodes_only: bool,
    episodes: EpisodeLog,
    global_step: int,
) -> np.ndarray:
    """Fill ``buf`` with the policy's samples from ``obs`` on; returns the observation after the last step.

    ``first_episodes_only``: stop once every env has ended an episode (grouped starts: later episodes do not count)."""
    space = envs.single_action_space
    done_once = np.zeros(envs.num_envs, dtype=bool)
    buf.final_values[:] = 0.0
    t = 0
    for t in range(buf.obs.shape[0]):
        buf.obs[t] = obs
        o = torch.from_numpy(buf.obs[t])
        actions, logprobs = agent.act(o)
        buf.actions[t], buf.logprobs[t] = actions.numpy(), logprobs.numpy()
        if needs_values:
            buf.values[t] = agent.value(o).numpy()
        # a Gaussian's sample may leave the bounds: the env gets it clipped, the loss sees the sample (as SB3)
        env_actions = np.clip(buf.actions[t], space.low, space.high) if agent.continuous else buf.actions[t]
        obs, buf.rewards[t], buf.terminated[t], buf.truncated[t], info = envs.step(env_actions)
        if "_final_obs" in info:
            env_ids, returns = observe_final(agent, buf, t, info, needs_values)
            episodes.steps += [global_step + (t + 1) * envs.num_envs] * len(env_ids)
            episodes.returns += [float(r) for r in returns]
        done_once |= buf.terminated[t] | buf.truncated[t]
        if first_episodes_only and done_once.all():
            break
    buf.length = t + 1
    if needs_values:
        buf.last_values = agent.value(torch.from_numpy(np.asarray(obs, dtype=np.float32))).numpy()
    return obs


def advantages(buf: Rollout, args: Args) -> Batch:
    """The registered estimator's advantages, the whitening and the ``loss_agg_mode`` weights (one
    :func:`vla_algos.rollout_advantages` call, as vla-train runs it), flattened to samples."""
    n = buf.length
    tensor = torch.from_numpy
    adv = rollout_advantages(
        rewards=tensor(buf.rewards[:n, :, None]),  # chunks of one action
        terminated=tensor(buf.terminated[:n, :, None]),
        truncated=tensor(buf.truncated[:n, :, None]),
        loss_mask=torch.ones(n, buf.obs.shape[1], dtype=torch.bool),
        values=tensor(buf.values[:n]) if get_advantage_estimator(args.adv_type).needs_values else None,
        last_values=tensor(buf.last_values),
        final_values=tensor(buf.final_values[:n]),
        adv_type=args.adv_type,
        gamma=args.gamma,
        gae_lambda=args.gae_lambda,
        reward_type="chunk_level",
        logprob_type=args.logprob_type,
        group_size=args.group_size,
        loss_agg_mode=args.loss_agg_mode,
        normalize=args.whiten_advantages == "rollout",
        whiten_std_eps=1e-8,
    )

    def samples(x: np.ndarray) -> torch.Tensor:  # [T, B, ...] -> [T * B, ...]
        return tensor(x[:n].reshape(-1, *x.shape[2:]))

    return Batch(
        obs=samples(buf.obs),
        actions=samples(buf.actions),
        logprobs=samples(buf.logprobs),
        values=samples(buf.values),
        advantages=adv.advantages.reshape(-1),
        returns=None if adv.returns is None else adv.returns.reshape(-1),
        sample_weight=None if adv.sample_weight is None else adv.sample_weight.reshape(-1),
        loss_mask=adv.loss_mask.reshape(-1),
    )


# ---------------------------------------------------------------------------------------------- the update


def update(
    agent: ActorCritic,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    minibatches: Sequence[Sequence[torch.Tensor]],
    args: Args,
    *,
    settings: LossSettings | None = None,
    reference: ActorCritic | None = None,
) -> dict[str, float]:
    """PPO's update: for each epoch, for each minibatch (sample indices of ``batch``), one gradient step on the
    registered ``loss_type``'s loss. ``settings``: the loss's (default: ``args``' fields of the same names);
    ``reference``: the frozen policy of the KL penalty. Returns the last minibatch's metrics."""
    loss_fn = get_policy_loss(args.loss_type)
    settings = settings if settings is not None else LossSettings.from_config(args)
    metrics: dict[str, torch.Tensor] = {}
    for epoch in minibatches:
        for idx in epoch:
            logprobs, entropy, values = agent.evaluate(batch.obs[idx], batch.actions[idx])
            adv = batch.advantages[idx]
            if args.whiten_advantages == "minibatch" and len(idx) > 1:
                adv = masked_whiten(adv, std_eps=1e-8)  # (adv - mean) / (unbiased std + 1e-8), as SB3
            ref_logprobs = None
            if reference is not None:
                with torch.no_grad():
                    ref_logprobs = reference.evaluate(batch.obs[idx], batch.actions[idx])[0]
            # the loss: clipped ratio at settings.logprob_type - entropy_bonus x entropy [+ kl_beta x KL]
            # [+ value_loss_coef x value loss], each a weighted mean over this minibatch (one micro-batch)
            loss, metrics = loss_fn(
                LossInputs(
                    logprobs=logprobs,
                    old_logprobs=batch.logprobs[idx],
                    advantages=adv,
                    sample_weight=None if batch.sample_weight is None else batch.sample_weight[idx],
                    entropy=entropy,
                    ref_logprobs=ref_logprobs,
                    values=values,
                    old_values=batch.values[idx],
                    returns=None if batch.returns is None else batch.returns[idx],
                ),
                settings,
            )
            if args.target_kl is not None and float(metrics["actor/approx_kl"]) > 1.5 * args.target_kl:
                return {k: float(v) for k, v in metrics.items()}
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
    return {k: float(v) for k, v in metrics.items()}


def make_optimizer(agent: ActorCritic, args: Args) -> torch.optim.Optimizer:
    """Adam with SB3's (and CleanRL's) ``eps=1e-5``; the fused kernel: the same update in fewer passes."""
    return torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)


def shuffled_minibatches(
    mask: torch.Tensor, batch_size: int, epochs: int, generator: torch.Generator
) -> list[list[torch.Tensor]]:
    """For each epoch, the samples of ``mask`` in a fresh random order, cut into minibatches of ``batch_size``."""
    samples = mask.nonzero().squeeze(1)
    return [
        list(samples[torch.randperm(len(samples), generator=generator)].split(batch_size))
        for _ in range(epochs)
    ]


# ---------------------------------------------------------------------------------------------- the loop


@dataclass
class Result:
    agent: ActorCritic
    episodes: EpisodeLog
    env_steps: int
    seconds: float  # wall time of the loop (rollouts and updates)
    obs_normalizer: Any  # the first env's NormalizeObservation wrapper (for evaluation), or None


def check(args: Args) -> None:
    """One-line errors for settings that cannot run together (unknown names raise in the registries)."""
    estimator, loss_fn = get_advantage_estimator(args.adv_type), get_policy_loss(args.loss_type)
    if estimator.needs_values and not loss_fn.uses_critic:
        raise ValueError(
            f"adv_type={args.adv_type!r} needs a critic that loss_type={args.loss_type!r} does not train"
        )
    if estimator.grouped_starts and (args.group_size < 2 or args.num_envs % args.group_size):
        raise ValueError(f"adv_type={args.adv_type!r} needs num_envs a multiple of group_size >= 2")
    if args.whiten_advantages not in ("minibatch", "rollout", "none"):
        raise ValueError(f"whiten_advantages={args.whiten_advantages!r}; valid: minibatch, rollout, none")
    if args.value_clip_mode not in VALUE_CLIP_MODES:
        raise ValueError(f"value_clip_mode={args.value_clip_mode!r}; valid: {', '.join(VALUE_CLIP_MODES)}")


def group_seeds(args: Args, iteration: int) -> list[int]:
    """Reset seeds of the envs for a grouped-starts estimator: ``group_size`` consecutive envs share one, a fresh one
    per group and iteration."""
    groups = args.num_envs // args.group_size
    first = args.seed * 1_000_003 + iteration * groups
    return [first + g for g in range(groups) for _ in range(args.group_size)]


def train(args: Args, *, log: Callable[[str], None] | None = print) -> Result:
    """Train a fresh actor-critic on ``args.env_id`` for ``args.total_steps`` env steps."""
    check(args)
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)
    estimator = get_advantage_estimator(args.adv_type)
    envs = make_envs(args)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = ActorCritic(
        obs_dim,
        envs.single_action_space,
        hidden_sizes=args.hidden_sizes,
        activation=args.activation,
        ortho_init=args.ortho_init,
        log_std_init=args.log_std_init,
    )
    reference = copy.deepcopy(agent).requires_grad_(False) if args.kl_beta > 0 else None
    optimizer = make_optimizer(agent, args)
    buf = Rollout.empty(args.num_steps, args.num_envs, obs_dim, envs.single_action_space)
    generator = torch.Generator().manual_seed(args.seed)
    episodes = EpisodeLog()
    obs, _ = envs.reset(seed=args.seed)  # env i starts from seed + i
    global_step, start = 0, time.perf_counter()
    iteration = 0
    while global_step < args.total_steps:  # whole rollouts (a grouped-starts rollout may end early)
        if estimator.grouped_starts:  # each group of envs from one seeded start, one episode each
            obs, _ = envs.reset(seed=group_seeds(args, iteration))
        obs = collect(
            envs,
            agent,
            buf,
            obs,
            needs_values=estimator.needs_values,
            first_episodes_only=estimator.grouped_starts,
            episodes=episodes,
            global_step=global_step,
        )
        global_step += buf.length * args.num_envs
        remaining = max(0.0, 1.0 - global_step / args.total_steps)  # SB3's progress_remaining
        for group in optimizer.param_groups:
            group["lr"] = args.learning_rate * (remaining if args.anneal_lr else 1.0)
        settings = LossSettings.from_config(args)
        if args.anneal_clip:
            low, high = remaining * args.clip_ratio_low, remaining * args.clip_ratio_high
            settings = replace(settings, clip_ratio_low=low, clip_ratio_high=high)
        batch = advantages(buf, args)
        minibatches = shuffled_minibatches(batch.loss_mask, args.batch_size, args.update_epoch, generator)
        metrics = update(agent, optimizer, batch, minibatches, args, settings=settings, reference=reference)
        if log is not None and episodes.returns:
            recent = np.mean(episodes.returns[-20:])
            log(
                f"iteration {iteration} step {global_step} return(last 20) {recent:.1f} "
                f"approx_kl {metrics.get('actor/approx_kl', float('nan')):.4f} "
                f"{global_step / (time.perf_counter() - start):.0f} steps/s"
            )
        iteration += 1
    seconds = time.perf_counter() - start
    normalizer = None
    if args.normalize_env:
        normalizer = envs.envs[0].get_wrapper_attr("obs_rms")
    envs.close()
    return Result(agent, episodes, global_step, seconds, normalizer)


def evaluate(
    act: Callable[[np.ndarray], np.ndarray],
    args: Args,
    seeds: Sequence[int],
    obs_rms: Any = None,
) -> list[float]:
    """Raw returns of one episode per seed (held-out starts), actions from ``act(obs [1, D]) -> [1, ...]``; with
    ``obs_rms`` the observations are normalised by these frozen statistics (those the policy trained with)."""
    env = make_env(args.env_id, normalize=args.normalize_env, gamma=args.gamma)()
    if obs_rms is not None:
        wrapper = env
        while not isinstance(wrapper, gym.wrappers.NormalizeObservation):
            wrapper = wrapper.env
        wrapper.obs_rms = copy.deepcopy(obs_rms)
        wrapper.update_running_mean = False
    returns = []
    for seed in seeds:
        obs, _ = env.reset(seed=int(seed))
        while True:
            action = act(np.asarray(obs, dtype=np.float32)[None])[0]
            if isinstance(env.action_space, gym.spaces.Box):
                action = np.clip(action, env.action_space.low, env.action_space.high)
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                returns.append(float(info["episode"]["r"]))
                break
    env.close()
    return returns


def greedy_actor(agent: ActorCritic) -> Callable[[np.ndarray], np.ndarray]:
    """``obs [n, D] -> actions``: the policy's most likely action (SB3's ``deterministic=True``)."""

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        return agent.act(torch.as_tensor(obs), greedy=True)[0].numpy()

    return act


# ---------------------------------------------------------------------------------------------- command line


def parse_args(argv: Sequence[str] | None = None) -> tuple[Args, int]:
    """``Args`` from the command line (one flag per field), and the number of held-out evaluation episodes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in fields(Args):
        flag, default = "--" + f.name.replace("_", "-"), f.default
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        elif isinstance(default, tuple):
            parser.add_argument(flag, type=int, nargs="+", default=default)
        elif default is None:
            parser.add_argument(flag, type=lambda s: None if s.lower() == "none" else float(s), default=None)
        else:
            parser.add_argument(flag, type=type(default), default=default)
    parser.add_argument("--eval-episodes", type=int, default=10)
    ns = vars(parser.parse_args(argv))
    episodes = ns.pop("eval_episodes")
    ns["hidden_sizes"] = tuple(ns["hidden_sizes"])
    return Args(**ns), episodes


def main(argv: Sequence[str] | None = None) -> int:
    args, eval_episodes = parse_args(argv)
    try:
        check(args)
    except ValueError as err:
        print(f"error: {err}")
        return 2
    result = train(args)
    held_out = range(10_000 + 1000 * args.seed, 10_000 + 1000 * args.seed + eval_episodes)
    returns = evaluate(greedy_actor(result.agent), args, held_out, result.obs_normalizer)
    print(
        f"{args.env_id}: {result.env_steps} env steps in {result.seconds:.1f} s "
        f"({result.env_steps / result.seconds:.0f}/s); held-out return {np.mean(returns):.1f} +- {np.std(returns):.1f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
