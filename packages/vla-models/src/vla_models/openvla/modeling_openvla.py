"""OpenVLA policy: Prismatic backbone, action tokens decoded one after another (KV cache)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from vla_models.action_logprobs import action_logits, sample_offsets
from vla_models.policy_output import PolicyOutput
from vla_models.prismatic.policy_prismatic import PrismaticVLAPolicy
from vla_models.prismatic.sequence_layout import build_attention_mask, position_ids_from
from vla_models.sampling import Generators


class OpenVLAPolicy(PrismaticVLAPolicy):
    """Autoregressive OpenVLA: ``C * A`` action tokens restricted to the 256 action bins.

    ``predict`` samples token by token with a KV cache, then recomputes log-probs, entropy and values with the
    same teacher-forced forward as ``evaluate`` (so the PPO ratio starts at exactly 1).
    """

    bidirectional_slots = False

    def _slot_embeds(self, fi: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return self.backbone.embed_tokens(fi["action_tokens"].flatten(1).to(self.device))

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
        """Sample (``mode="sample"``) or take the argmax (``"greedy"``) of each action token.

        Args:
            obs: vla_envs observation dict (numpy or torch).
            mode: "sample" or "greedy".
            temperature: logits are divided by it before sampling (and in the stored log-probs).
            top_k: keep only the k most likely bins (None: all 256).
            generator: optional RNG for sampling: one for the batch or one per row (`vla_models.sampling`).

        Returns:
            ``PolicyOutput`` with actions/logprobs/entropy ``[B, C, A]`` and values ``[B]`` or None.
        """
        fi = self.prepare_inputs(obs)
        b = fi["images"].shape[0]
        fi["temperature"], fi["top_k"] = self._sampling_tensors(b, mode, temperature, top_k)
        prefix, valid = self._prefix(fi)
        mask = build_attention_mask(valid, 0, bidirectional=False)
        pos = position_ids_from(valid)
        hidden, cache = self.backbone.decode(prefix, mask, pos, use_cache=True)
        last_h, last_pos = hidden[:, -1:], pos[:, -1:]
        weight = self._action_weight()
        key_valid = valid
        tokens = []
        for step in range(self.config.num_action_tokens):
            logits = action_logits(last_h, weight, temperature=fi["temperature"], top_k=fi["top_k"])
            off = sample_offsets(logits, greedy=mode == "greedy", generator=generator)  # [B, 1]
            tok = self.action_tokenizer.offsets_to_token_ids(off)
            tokens.append(tok)
            if step == self.config.num_action_tokens - 1:
                break
            key_valid = torch.cat([key_valid, torch.ones(b, 1, dtype=torch.bool, device=self.device)], 1)
            last_pos = last_pos + 1
            step_mask = key_valid[:, None, None, :]
            last_h, cache = self.backbone.decode(
                self.backbone.embed_tokens(tok), step_mask, last_pos, past_key_values=cache, use_cache=True
            )
        fi["action_tokens"] = torch.cat(tokens, 1).view(
            b, self.config.num_action_chunks, self.config.action_dim
        )
        return self._finish(fi)
