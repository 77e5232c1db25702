"""OpenVLA-OFT policy: all ``C * A`` action tokens from one forward pass (parallel decoding)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from vla_models.action_logprobs import action_logits, action_logprobs_and_entropy, sample_offsets
from vla_models.policy_output import PolicyOutput
from vla_models.prismatic.policy_prismatic import PrismaticVLAPolicy
from vla_models.sampling import Generators


class OpenVLAOFTPolicy(PrismaticVLAPolicy):
    """Parallel decoding: ``C * A`` placeholder slots (zero or learned embeddings), all decoded in one forward.

    ``implement_version`` picks the layout:

    * "official" (OpenVLA-OFT): ``[BOS][images][proprio][prompt][slots][STOP]``, every position attends to every
      other, slot k's distribution is read at the position just before it;
    * "rlinf" (the reference framework's own variant): the same without STOP and without a proprio token;
    * "causal_prefix": the prefix attends causally, the slots attend to the prefix and to each other, and each
      slot is read at itself (the tiny CPU models).

    ``predict`` and ``evaluate`` run the very same forward (the slots do not depend on the sampled tokens), so
    the log-probs agree exactly and rollout costs a single pass. With ``action_head="l1"`` the actions come from
    OFT's L1-regression head on the same hidden states (greedy only); log-probs stay those of the argmax tokens.
    """

    bidirectional_slots = True
    normalization_eps = 1e-8

    def _set_layout(self) -> None:
        version = self.config.implement_version
        self.full_attention = version in ("official", "rlinf")
        self.stop_token = version == "official"
        self.shifted_readout = version in ("official", "rlinf")

    def _slot_embeds(self, fi: Mapping[str, torch.Tensor]) -> torch.Tensor:
        b = fi["input_ids"].shape[0]
        n, h = self.config.num_action_tokens, self.config.backbone.text.hidden_size
        if self.action_queries is not None:
            return self.action_queries.unsqueeze(0).expand(b, n, h)
        return torch.zeros(b, n, h, dtype=self.dtype, device=self.device)

    @torch.no_grad()
    def predict(
        self,
        obs: Mapping[str, Any],
        *,
        mode: str = "sample",
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: Generators = None,
    ) -> PolicyOutput:
        """Sample (``mode="sample"``) or argmax (``"greedy"``) all action tokens of a chunk at once.

        Args:
            obs: vla_envs observation dict (``images``, ``wrist_images``, ``states``, ``task_descriptions``).
            mode: "sample" or "greedy".
            temperature: logits are divided by it (also in the stored log-probs).
            top_k: keep only the k most likely bins (None: all).
            generator: optional RNG for sampling: one for the batch or one per row (`vla_models.sampling`).

        Returns:
            ``PolicyOutput`` with actions/logprobs/entropy ``[B, C, A]`` and values ``[B]`` or None.
        """
        if self.l1_head is not None and mode != "greedy":
            raise ValueError(
                f"mode={mode!r} is invalid with action_head='l1': the L1 head regresses actions "
                "deterministically (use mode='greedy', or action_head='discrete' to sample tokens)"
            )
        fi = self.prepare_inputs(obs)
        b = fi["images"].shape[0]
        fi["temperature"], fi["top_k"] = self._sampling_tensors(b, mode, temperature, top_k)
        hidden, critic_in = self._hidden_at_actions(fi)
        weight = self._action_weight()
        logits = action_logits(hidden, weight, temperature=fi["temperature"], top_k=fi["top_k"])
        offsets = sample_offsets(logits, greedy=mode == "greedy", generator=generator)
        shape = (b, self.config.num_action_chunks, self.config.action_dim)
        fi["action_tokens"] = self.action_tokenizer.offsets_to_token_ids(offsets).view(shape)
        logp, ent = action_logprobs_and_entropy(
            hidden, weight, offsets, temperature=fi["temperature"], top_k=fi["top_k"]
        )
        if self.l1_head is not None:
            actions = self.l1_actions(hidden)
        else:
            actions = self._decode_actions(fi["action_tokens"])
        logp, ent = self._constant_dims_deterministic(logp.view(shape), ent.view(shape))
        return PolicyOutput(
            actions=actions,
            logprobs=logp,
            values=self._values(critic_in),
            forward_inputs=fi,
            entropy=ent,
        )

    def l1_actions(self, slot_hidden: torch.Tensor) -> torch.Tensor:
        """L1-head actions in env units ``[B, C, A]`` (float32) from the slot hidden states ``[B, C*A, H]``."""
        norm = self.l1_head(slot_hidden, self.config.num_action_chunks)
        return self.action_normalizer.unnormalize(norm) if self.action_normalizer is not None else norm

    def sft_loss(
        self, obs: Mapping[str, Any], expert_actions: torch.Tensor | Any
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Discrete heads: cross-entropy over the bins (see the base class). ``action_head="l1"``: OpenVLA-OFT's
        L1 loss between the head's normalised actions and the normalised expert actions."""
        if self.l1_head is None:
            return super().sft_loss(obs, expert_actions)
        fi = self.prepare_inputs(obs)
        acts = torch.as_tensor(expert_actions, dtype=torch.float32, device=self.device)
        want = (fi["images"].shape[0], self.config.num_action_chunks, self.config.action_dim)
        if tuple(acts.shape) != want:
            raise ValueError(
                f"expert_actions must have shape [B, C, A] = {list(want)}, got {list(acts.shape)}"
            )
        target = self.action_normalizer.normalize(acts) if self.action_normalizer is not None else acts
        hidden, _ = self._hidden_at_actions(fi)
        pred = self.l1_head(hidden, self.config.num_action_chunks)
        loss = torch.nn.functional.l1_loss(pred, target)
        return loss, {"sft/loss": float(loss.detach()), "sft/l1_normalized": float(loss.detach())}
