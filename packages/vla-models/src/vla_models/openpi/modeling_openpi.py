"""pi0 / pi0.5 as a policy: the denoising chain over ``vla_models.openpi.velocity_openpi``'s velocity, the RL
log-probabilities of its noisy steps (``vla_models.openpi.flow_logprob``), the critic, the supervised flow-matching
loss and persistence.

One decision: the prefix runs once; each denoising step runs the expert on the current point of the chain. The
chain and the scored steps are stored in ``forward_inputs``, so ``evaluate`` recomputes exactly what was sampled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from vla_models.observations import check_observation
from vla_models.openpi.configuration_openpi import OpenPiConfig
from vla_models.openpi.flow_logprob import (
    gaussian_entropy,
    gaussian_logprob,
    sde_sigma,
    step_mean_std,
    timesteps,
)
from vla_models.openpi.layers_openpi import Prefix
from vla_models.openpi.processing_openpi import PromptTokenizer, aloha_state_to_pi, stack_cameras
from vla_models.openpi.velocity_openpi import OpenPiVelocityModel
from vla_models.policy_output import PolicyOutput
from vla_models.sampling import Generators, randint_rows, randn_rows

#: ``denoise_inds`` of a greedy (plain ODE) row and of a row scored at every step (``joint_logprob``).
GREEDY, JOINT = -1, -2


class OpenPiPolicy(OpenPiVelocityModel):
    """pi0 / pi0.5 with the package's policy contract (``predict`` / ``evaluate`` / ``sft_loss`` / ``values``).

    ``forward_inputs`` (leading dim B, fixed widths, so rollouts stack with ``torch.cat``): ``images`` uint8
    ``[B, N, S, S, 3]``, ``image_mask`` ``[B, N]``, ``input_ids`` / ``text_mask`` ``[B, L]``, ``states`` float32
    ``[B, D]`` (raw; in pi0's ALOHA convention with ``adapt_to_pi``), ``chains`` float32 ``[B, K+1, H, 32]`` (every point of the denoising chain),
    ``denoise_inds`` int64 ``[B]`` (the scored step; -1 greedy, -2 every step), ``noise_level`` and ``temperature``
    float32 ``[B]`` (as sampled, so annealing and temperature are recomputed exactly).
    """

    # what the RL objective never reaches (``vla_models.rl_parameters``): every trainable part is in its loss
    rl_untrained_prefixes: tuple[str, ...] = ()

    def __init__(self, config: OpenPiConfig, tokenizer: Any) -> None:
        super().__init__(config)
        self.tokenizer = tokenizer
        self.prompts = PromptTokenizer(tokenizer, config.token_len, state_in_prompt=config.state_in_prompt)
        self.global_step = 0

    # ---- schedule -------------------------------------------------------------------------------------------
    def set_global_step(self, step: int) -> None:
        """The training iteration ``noise_anneal`` reads (the trainer sets it on the rollout before each
        iteration's rollouts; the sampled noise level is stored per row, so ``evaluate`` recomputes it exactly
        whatever the step is then)."""
        self.global_step = int(step)

    # ---- inputs ---------------------------------------------------------------------------------------------
    def prepare_inputs(self, obs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Observation dict -> ``images``, ``image_mask``, ``input_ids``, ``text_mask``, ``states`` on the device,
        after ``vla_models.observations.check_observation`` (strings, finite values, at least one row)."""
        check_observation(obs)
        cfg = self.config
        images, image_mask = stack_cameras(obs, cfg.num_images_in_input, cfg.sizes.image_size)
        b = images.shape[0]
        states = obs.get("states")
        states = (
            torch.zeros(b, 0)
            if states is None
            else torch.as_tensor(states, dtype=torch.float32).reshape(b, -1)
        )
        if cfg.state_indices is not None:
            states = states[:, list(cfg.state_indices)]
        if cfg.adapt_to_pi:  # the state in pi0's ALOHA convention (what normalisation and delta actions see)
            states = aloha_state_to_pi(states)
        if states.shape[1] > cfg.model_action_dim:
            raise ValueError(
                f"states have {states.shape[1]} dims, more than model_action_dim={cfg.model_action_dim}; "
                "select columns with state_indices"
            )
        norm_state = self.normalized_states(states)
        ids, mask = self.prompts(list(obs["task_descriptions"]), norm_state, self.device)
        return {
            "images": images.to(self.device),
            "image_mask": image_mask.to(self.device),
            "input_ids": ids,
            "text_mask": mask,
            "states": states.to(self.device),
        }

    # ---- denoising ------------------------------------------------------------------------------------------
    def _noise_std(self, hidden: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
        return self.noise_head(hidden).float() * temperature[:, None, None]

    def _step(
        self,
        method: str,
        x: torch.Tensor,
        v: torch.Tensor,
        hidden: torch.Tensor,
        k: torch.Tensor,
        noise_level: torch.Tensor,
        temperature: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std of step ``k`` (per row) under ``method``."""
        ts = timesteps(self.config.num_steps, device=x.device)
        t, delta = ts[k], ts[k] - ts[k + 1]
        kw: dict[str, torch.Tensor] = {}
        if method == "flow_sde":
            kw["sigma"] = sde_sigma(ts, k, noise_level)
        elif method == "flow_cps":
            kw["noise_level"] = noise_level
        elif method == "flow_noise":
            kw["noise_std"] = self._noise_std(hidden, temperature)
        return step_mean_std(method, x, v, t, delta, **kw)

    def _score(
        self, prefix: Prefix, fi: Mapping[str, torch.Tensor], *, compute_values: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Log-probs and entropy ``[B, C, A]`` of the stored chain's scored steps, and values ``[B]``."""
        cfg = self.config
        chains, inds = fi["chains"].float(), fi["denoise_inds"].long()
        nl, temp, states = fi["noise_level"].float(), fi["temperature"].float(), fi["states"]
        b, k_steps = chains.shape[0], cfg.num_steps
        logp = torch.zeros(b, *chains.shape[2:], device=chains.device)
        ent = torch.zeros_like(logp)
        method = cfg.noise_method
        single = torch.nonzero(inds >= 0).squeeze(-1)
        if len(single):
            k = inds[single]
            x, xn = chains[single, k], chains[single, k + 1]
            v, h = self.expert_pass(prefix, single, x, self._times(k), states[single])
            mean, std = self._step(method, x, v, h, k, nl[single], temp[single])
            logp = logp.index_put((single,), gaussian_logprob(xn, mean, std))
            ent = ent.index_put((single,), gaussian_entropy(std, xn.shape))
        joint = torch.nonzero(inds == JOINT).squeeze(-1)
        if len(joint):
            rows = joint.repeat_interleave(k_steps)
            k = torch.arange(k_steps, device=chains.device).repeat(len(joint))
            x = chains[joint, :k_steps].flatten(0, 1)
            xn = chains[joint, 1:].flatten(0, 1)
            v, h = self.expert_pass(prefix, rows, x, self._times(k), states[rows])
            mean, std = self._step(method, x, v, h, k, nl[rows], temp[rows])
            lp = gaussian_logprob(xn, mean, std).view(len(joint), k_steps, *xn.shape[1:])
            x0 = chains[joint, 0]
            lp0 = -0.5 * x0**2 - 0.5 * math.log(2 * math.pi)
            logp = logp.index_put((joint,), (lp0 + lp.sum(1)) / (k_steps + 1))
            e = gaussian_entropy(std, xn.shape).view(len(joint), k_steps, *xn.shape[1:])
            e0 = gaussian_entropy(torch.ones_like(x0), x0.shape)  # the initial noise's N(0, I) term
            ent = ent.index_put((joint,), (e0 + e.sum(1)) / (k_steps + 1))
        c, a = cfg.num_action_chunks, cfg.action_dim
        values = self._values(prefix, fi) if compute_values else None
        return logp[:, :c, :a], ent[:, :c, :a], values

    def _times(self, k: torch.Tensor) -> torch.Tensor:
        return timesteps(self.config.num_steps, device=k.device)[k]

    def _values(self, prefix: Prefix, fi: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """The critic: one definition in predict (sampled or greedy) and evaluate (see the README)."""
        cfg = self.config
        if self.value_head is None:
            return None
        if cfg.critic_after_vlm:
            out, valid = prefix.out, prefix.valid
            if cfg.value_vlm_mode == "mean_token":
                m = valid.unsqueeze(-1).to(out.dtype)
                feat = (out * m).sum(1) / m.sum(1).clamp_min(1)
            else:
                idx = torch.arange(valid.shape[1], device=valid.device)
                pick = (
                    (valid * idx).argmax(1) if cfg.value_vlm_mode == "last_token" else valid.float().argmax(1)
                )
                feat = out[torch.arange(out.shape[0], device=out.device), pick]
        else:
            chains = fi["chains"].float()
            ones = torch.ones(chains.shape[0], device=chains.device)
            with torch.set_grad_enabled(torch.is_grad_enabled() and not cfg.detach_critic_input):
                _, h = self.expert_pass(prefix, None, chains[:, 0], ones, fi["states"])
            h = h[:, : cfg.num_action_chunks] if cfg.chunk_critic_input else h
            feat = h.mean(1)
        if cfg.detach_critic_input:
            feat = feat.detach()
        return self.value_head(feat.to(self.value_head.mlp[0].weight.dtype))

    # ---- contract -------------------------------------------------------------------------------------------
    def _prefix_for_training(self, fi: Mapping[str, torch.Tensor]) -> Prefix:
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.config.train_expert_only):
            return self.compute_prefix(fi)

    def evaluate(
        self, forward_inputs: Mapping[str, torch.Tensor], *, compute_values: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Recompute what ``predict`` sampled, with gradients: ``(logprobs [B, C, A], entropy [B, C, A], values
        [B] or None)``, float32. Log-probs are those of the stored chain's scored step per row (0 for greedy
        rows); with ``joint_logprob`` the mean over ``log N(x_0; 0, I)`` and the K steps."""
        fi = {k: v.to(self.device) for k, v in forward_inputs.items()}
        prefix = self._prefix_for_training(fi)
        return self._score(prefix, fi, compute_values=compute_values)

    def predict(
        self,
        obs: Mapping[str, Any],
        *,
        mode: str = "sample",
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: Generators = None,
    ) -> PolicyOutput:
        """Denoise a chunk per observation.

        ``mode="sample"``: the noise method makes one step per row stochastic (drawn uniformly per row from the
        generator; every step with ``joint_logprob``); ``temperature`` scales its noise level / learned std.
        ``mode="greedy"``: the plain Euler ODE (log-probs 0). ``top_k`` has no meaning for a flow policy and must
        be None. Returns actions ``[B, C, A]`` in env units, log-probs and entropy ``[B, C, A]``, values ``[B]``.
        """
        if mode not in ("sample", "greedy"):
            raise ValueError(f"mode={mode!r} is not supported; allowed: ('sample', 'greedy')")
        if top_k is not None:
            raise ValueError(f"top_k={top_k!r} is not supported by a flow policy (openpi); leave it unset")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        cfg = self.config
        fi = self.prepare_inputs(obs)
        b, dev = fi["images"].shape[0], self.device
        k_steps = cfg.num_steps
        with torch.no_grad():
            prefix = self.compute_prefix(fi)
            x = randn_rows((b, cfg.action_horizon, cfg.model_action_dim), generator, dev)
            if mode == "greedy" or cfg.noise_method == "flow_ode":
                inds = torch.full((b,), GREEDY, dtype=torch.long, device=dev)
            elif cfg.joint_logprob:
                inds = torch.full((b,), JOINT, dtype=torch.long, device=dev)
            else:
                high = k_steps - 1 if cfg.ignore_last else k_steps
                inds = randint_rows(high, b, generator, dev)
            nl = torch.full((b,), cfg.noise_level_at(self.global_step) * temperature, device=dev)
            temp = torch.full((b,), float(temperature), device=dev)
            chain = [x]
            for i in range(k_steps):
                k = torch.full((b,), i, dtype=torch.long, device=dev)
                v, h = self.expert_pass(prefix, None, x, self._times(k), fi["states"])
                noisy = (inds == i) | (inds == JOINT)
                mean, std = self._step("flow_ode", x, v, h, k, nl, temp)
                if noisy.any():
                    m2, s2 = self._step(cfg.noise_method, x, v, h, k, nl, temp)
                    sel = noisy[:, None, None]
                    mean = torch.where(sel, m2, mean)
                    std = torch.where(sel, torch.broadcast_to(s2, x.shape), torch.zeros_like(x))
                eps = randn_rows(tuple(x.shape), generator, dev)
                x = mean + std * eps
                chain.append(x)
            fi.update(
                chains=torch.stack(chain, dim=1).float(),
                denoise_inds=inds,
                noise_level=nl,
                temperature=temp,
            )
            logp, ent, values = self._score(prefix, fi, compute_values=True)
        return PolicyOutput(
            actions=self.actions_from_model(x, fi["states"]),
            logprobs=logp,
            values=values,
            forward_inputs=fi,
            entropy=ent,
        )

    @torch.no_grad()
    def values(self, obs: Mapping[str, Any], *, generator: Generators = None) -> torch.Tensor:
        """V(obs) float32 ``[B]``: the critic ``predict`` returns, without denoising; zeros without a value head
        or for an empty batch.

        ``value_after_vlm``: one prefix pass. Otherwise the prefix pass and the expert's step-0 pass (t = 1) on
        the initial noise, drawn from ``generator`` as ``predict`` draws it, so the same generator state gives
        ``predict``'s value.
        """
        cfg = self.config
        b = len(obs["task_descriptions"])
        if self.value_head is None or b == 0:
            return torch.zeros(b, device=self.device)
        fi = self.prepare_inputs(obs)
        prefix = self.compute_prefix(fi)
        if not cfg.critic_after_vlm:
            shape = (b, cfg.action_horizon, cfg.model_action_dim)
            fi["chains"] = randn_rows(shape, generator, self.device)[:, None]
        return self._values(prefix, fi)

    def sft_loss(
        self, obs: Mapping[str, Any], expert_actions: torch.Tensor | Any
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Flow-matching loss on expert chunks ``[B, C, A]`` (env units): ``t ~ 0.999 Beta(1.5, 1) + 0.001``,
        ``x_t = t noise + (1 - t) a``, MSE of the velocity against ``noise - a`` over the first C steps (all 32
        dims, or ``[:C, :A]`` with ``sft_loss_dims="env"``)."""
        cfg = self.config
        fi = self.prepare_inputs(obs)
        acts = torch.as_tensor(expert_actions, dtype=torch.float32, device=self.device)
        want = (fi["images"].shape[0], cfg.num_action_chunks, cfg.action_dim)
        if tuple(acts.shape) != want:
            raise ValueError(
                f"expert_actions must have shape [B, C, A] = {list(want)}, got {list(acts.shape)}"
            )
        a = self.model_actions(acts, fi["states"])
        b = a.shape[0]
        beta = torch.distributions.Beta(torch.tensor(1.5), torch.tensor(1.0)).sample((b,)).to(self.device)
        t = beta * 0.999 + 0.001
        noise = torch.randn_like(a)
        x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * a
        prefix = self._prefix_for_training(fi)
        v, _ = self.expert_pass(prefix, None, x_t, t, fi["states"])
        c = cfg.num_action_chunks
        dims = cfg.action_dim if cfg.sft_loss_dims == "env" else cfg.model_action_dim
        loss = F.mse_loss(v[:, :c, :dims], (noise - a)[:, :c, :dims])
        with torch.no_grad():
            a_hat = x_t - t[:, None, None] * v
            l1 = (a_hat - a)[:, :c, : cfg.action_dim].abs().mean()
        return loss, {"sft/loss": float(loss.detach()), "sft/l1_normalized": float(l1)}

    # ---- persistence ----------------------------------------------------------------------------------------
    def save_pretrained(self, path: str, *, max_shard_bytes: int = 4 * 1024**3) -> None:
        """Write openpi's layout (``model.safetensors`` in openpi names, config.json, norm stats, tokenizer)."""
        from vla_models.openpi.checkpoint_openpi import save_openpi

        save_openpi(self, path, max_shard_bytes=max_shard_bytes)

    @classmethod
    def from_pretrained(cls, path: str, **overrides: Any) -> OpenPiPolicy:
        from vla_models.openpi.checkpoint_openpi import load_openpi

        return load_openpi(path, **overrides)
