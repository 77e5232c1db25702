"""``PrismaticVLAPolicy``: what the Prismatic-based policies (OpenVLA, OpenVLA-OFT) share -- inputs, the one
forward over the sequence of ``vla_models.prismatic.sequence_layout``, log-probs, values, the supervised loss and
persistence. Subclasses fill the action slots and decode (``predict``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vla_models.action_logprobs import action_logits, action_logprobs_and_entropy
from vla_models.action_tokenizer import ActionTokenizer
from vla_models.dtypes import DTYPES
from vla_models.lora import apply_lora, merge_lora_
from vla_models.meta_init import checkpoint_backed
from vla_models.normalization import normalizer_for, select_unnorm_key
from vla_models.policy_output import PolicyOutput
from vla_models.prismatic.action_head import L1RegressionActionHead
from vla_models.prismatic.modeling_prismatic import PrismaticBackbone
from vla_models.prismatic.processing_prismatic import OpenVLAProcessor
from vla_models.prismatic.sequence_layout import (
    build_attention_mask,
    full_attention_mask,
    position_ids_from,
)
from vla_models.sampling import Generators
from vla_models.value_head import ValueHead


class PrismaticVLAPolicy(nn.Module):
    """Base class; subclasses set the layout flags and implement ``predict``.

    Layout flags: ``bidirectional_slots`` (slots see each other), ``full_attention`` (every position sees every
    other), ``stop_token`` (an EOS token after the slots), ``shifted_readout`` (slot k is read at the position
    before it; otherwise at itself).
    """

    bidirectional_slots: bool = False
    full_attention: bool = False
    stop_token: bool = False
    shifted_readout: bool = True
    # the Llama-2 EOS id OpenVLA-OFT appends after the action slots
    stop_token_id: int = 2
    # OpenVLA-OFT adds 1e-8 to the normalisation range; OpenVLA does not
    normalization_eps: float = 0.0
    # what the RL objective never reaches (``vla_models.rl_parameters``): the L1 regression head regresses
    # greedy actions and trains under ``sft_loss`` only; RL scores the action tokens
    rl_untrained_prefixes: tuple[str, ...] = ("l1_head.",)

    def __init__(self, config: Any, tokenizer: Any) -> None:
        """``config``: an ``OpenVLAConfig`` (or a subclass: the family's own config)."""
        super().__init__()
        self.config = config
        cfg = config
        self.tokenizer = tokenizer
        with checkpoint_backed():  # a loader fills every backbone weight: none is created first
            self.backbone = PrismaticBackbone(
                cfg.backbone,
                use_film=getattr(cfg, "use_film", False),
                attn_implementation=cfg.attn_implementation,
            )
        h = cfg.backbone.text.hidden_size
        self.value_head = (
            ValueHead(h, hidden_sizes=cfg.value_head_hidden_sizes) if cfg.add_value_head else None
        )
        self.proprio_projector = None
        if getattr(cfg, "use_proprio", False):
            self.proprio_projector = nn.Sequential()
            self.proprio_projector.add_module("fc1", nn.Linear(cfg.proprio_dim, h))
            self.proprio_projector.add_module("act_fn1", nn.GELU())
            self.proprio_projector.add_module("fc2", nn.Linear(h, h))
        self.action_queries = None
        if getattr(cfg, "action_query", "zero") == "learned":
            self.action_queries = nn.Parameter(torch.randn(cfg.num_action_tokens, h) * 0.02)
        self.action_tokenizer = ActionTokenizer(vocab_size=cfg.backbone.vocab_size, n_bins=cfg.n_action_bins)
        self._set_layout()
        if getattr(cfg, "action_head", "discrete") == "l1":
            self.l1_head = L1RegressionActionHead(hidden_size=h, action_dim=cfg.action_dim)
        else:
            self.l1_head = None
        key = select_unnorm_key(cfg.norm_stats, cfg.unnorm_key)
        norm_kw = dict(normalization_type=cfg.normalization_type, eps=self.normalization_eps)
        self.action_normalizer = normalizer_for(cfg.norm_stats, key, "action", **norm_kw)
        self.proprio_normalizer = normalizer_for(cfg.norm_stats, key, "proprio", **norm_kw)
        if self.action_normalizer is not None and self.action_normalizer.dim != cfg.action_dim:
            raise ValueError(
                f"action_dim={cfg.action_dim} does not match the statistics of {key!r} "
                f"(dim {self.action_normalizer.dim})"
            )
        self.processor = OpenVLAProcessor(
            tokenizer,
            prompt_template=cfg.prompt_template,
            prompt_suffix_token_ids=cfg.prompt_suffix_token_ids,
            pad_token_id=cfg.backbone.pad_token_id,
            num_images=getattr(cfg, "num_images_in_input", 1),
            proprio_dim=cfg.proprio_dim if getattr(cfg, "use_proprio", False) else None,
            prompt_length=cfg.prompt_length,
        )

    # ---- setup --------------------------------------------------------------------------------------------
    def _set_layout(self) -> None:
        """Set the layout flags from the config (families with several layouts override this)."""

    def finalize(self) -> PrismaticVLAPolicy:
        """Apply LoRA (if ``is_lora``: the rest of the backbone is frozen) and cast to ``precision``; call after
        loading base weights."""
        if self.config.is_lora:
            apply_lora(
                self.backbone.language_model,
                rank=self.config.lora_rank,
                alpha=self.config.lora_alpha,
                dropout=self.config.lora_dropout,
            )
            # the base backbone is frozen; adapters and the small task heads (value head, proprio projector,
            # action queries, FiLM) train
            for name, p in self.backbone.named_parameters():
                p.requires_grad_("lora_" in name or name.startswith("film."))
        self.to(DTYPES[self.config.precision])
        return self

    def set_global_step(self, step: int) -> None:
        """The training iteration, for policies with a schedule over training (pi0's noise annealing); this
        family has none."""

    def merge_lora(self) -> None:
        """Fold LoRA into the base weights in place (for export); the policy then has no adapters."""
        merge_lora_(self.backbone.language_model)
        self.config = self.config.replace(is_lora=False)

    @property
    def device(self) -> torch.device:
        return self.backbone.projector.fc1.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.backbone.projector.fc1.weight.dtype

    # ---- inputs -------------------------------------------------------------------------------------------
    def prepare_inputs(self, obs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Observation dict -> tensors on the model device (``input_ids``, ``text_mask``, ``images``, ``states``),
        after ``vla_models.observations.check_observation`` (strings, finite values, at least one row)."""
        from vla_models.observations import check_observation

        check_observation(obs)
        return self.processor(obs, device=self.device)

    def _prefix(self, fi: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Embeddings ``[B, T0, H]`` and key validity ``[B, T0]`` of everything before the action slots."""
        ids, text_mask, images = fi["input_ids"], fi["text_mask"].bool(), fi["images"]
        b = ids.shape[0]
        emb = self.backbone.embed_tokens
        text = emb(ids)
        bos = emb(torch.full((b, 1), self.config.backbone.bos_token_id, device=ids.device, dtype=torch.long))
        language = self._film_language(text, text_mask, bos) if self.backbone.film is not None else None
        n_img = images.shape[1]
        if language is not None:
            language = language.repeat_interleave(n_img, dim=0)
        img = self.backbone.image_tokens(images.flatten(0, 1), language)
        img = img.view(b, n_img * img.shape[1], img.shape[2])
        parts, valid = [bos, img], [torch.ones(b, 1 + img.shape[1], dtype=torch.bool, device=ids.device)]
        if self.proprio_projector is not None:
            parts.append(
                self.proprio_projector(self.normalized_states(fi["states"]).to(self.dtype)).unsqueeze(1)
            )
            valid.append(torch.ones(b, 1, dtype=torch.bool, device=ids.device))
        parts.append(text)
        valid.append(text_mask)
        return torch.cat(parts, dim=1), torch.cat(valid, dim=1)

    def normalized_states(self, states: torch.Tensor) -> torch.Tensor:
        """Proprio ``[B, D]`` as the projector sees it: normalised with the ``proprio`` statistics (clipped to
        ``[-1, 1]``) when the checkpoint has them, else unchanged. float32."""
        states = states.float()
        return self.proprio_normalizer.normalize(states) if self.proprio_normalizer is not None else states

    def _film_language(self, text: torch.Tensor, text_mask: torch.Tensor, bos: torch.Tensor) -> torch.Tensor:
        """FiLM's language vector ``[B, H]``: the mean input embedding of BOS, the prompt and (when the layout
        has one) STOP -- every position that is not an image, proprio or action slot, as OpenVLA-OFT does."""
        m = text_mask.unsqueeze(-1).to(text.dtype)
        total = (text * m).sum(1) + bos[:, 0]
        count = m.sum(1) + 1.0
        if self.stop_token:
            stop = torch.full_like(text_mask[:, :1], self.stop_token_id, dtype=torch.long)
            total = total + self.backbone.embed_tokens(stop)[:, 0]
            count = count + 1.0
        return total / count

    def _slot_embeds(self, fi: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Input embeddings of the action slots ``[B, N, H]`` (family specific)."""
        raise NotImplementedError

    def _hidden_at_actions(self, fi: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward pass -> (hidden states predicting each action token ``[B, N, H]``, critic input ``[B, H]``)."""
        prefix, valid = self._prefix(fi)
        slots = self._slot_embeds(fi)
        b, n, t0 = slots.shape[0], slots.shape[1], prefix.shape[1]
        parts = [prefix, slots.to(prefix.dtype)]
        n_tail = n
        if self.stop_token:
            stop = torch.full((b, 1), self.stop_token_id, dtype=torch.long, device=valid.device)
            parts.append(self.backbone.embed_tokens(stop))
            n_tail += 1
        embeds = torch.cat(parts, dim=1)
        key_valid = torch.cat([valid, torch.ones(b, n_tail, dtype=torch.bool, device=valid.device)], 1)
        if self.full_attention:
            mask = full_attention_mask(key_valid)
        else:
            mask = build_attention_mask(key_valid, n, bidirectional=self.bidirectional_slots)
        hidden, _ = self.backbone.decode(embeds, mask, position_ids_from(key_valid))
        start = t0 - 1 if self.shifted_readout else t0
        return hidden[:, start : start + n], hidden[:, t0 - 1]

    def action_hidden_states(self, forward_inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Last-layer hidden states ``[B, C*A, H]`` at the positions that predict each action token (the L1
        head's input; OpenVLA: teacher forcing on ``action_tokens``, which default to bin 0 when absent)."""
        fi = {k: v.to(self.device) for k, v in forward_inputs.items()}
        if "action_tokens" not in fi:
            fi["action_tokens"] = torch.full(
                (fi["input_ids"].shape[0], self.config.num_action_chunks, self.config.action_dim),
                self.action_tokenizer.action_start,
                dtype=torch.long,
                device=self.device,
            )
        return self._hidden_at_actions(fi)[0]

    def action_bin_logits(self, forward_inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Raw logits ``[B, C*A, n_bins]`` (float32, temperature 1, no top-k) over the action bins at the
        positions that predict each action token."""
        return self.action_hidden_states(forward_inputs).float() @ self._action_weight().float().T

    def _critic_input(self, fi: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The value head's input ``[B, H]``: the hidden state just before the first action slot. Unless every
        position sees the slots (``full_attention``), that position sees only the prefix, so the prefix alone is
        run (no slots, no decoding)."""
        if self.full_attention:
            return self._hidden_at_actions(fi)[1]
        prefix, valid = self._prefix(fi)
        mask = build_attention_mask(valid, 0, bidirectional=False)
        hidden, _ = self.backbone.decode(prefix, mask, position_ids_from(valid))
        return hidden[:, -1]

    @torch.no_grad()
    def values(self, obs: Mapping[str, Any]) -> torch.Tensor:
        """V(obs) float32 ``[B]`` from one forward (the prefix), equal to ``predict(obs).values`` to float
        rounding; zeros without a value head or for an empty batch."""
        b = len(obs["task_descriptions"])
        if self.value_head is None or b == 0:
            return torch.zeros(b, device=self.device)
        return self._values(self._critic_input(self.prepare_inputs(obs)))

    def _values(self, critic_input: torch.Tensor) -> torch.Tensor | None:
        if self.value_head is None:
            return None
        x = critic_input.detach() if self.config.detach_critic_input else critic_input
        return self.value_head(x)

    def _action_weight(self) -> torch.Tensor:
        return self.backbone.action_weight(self.action_tokenizer.action_start, self.config.n_action_bins)

    # ---- contract -----------------------------------------------------------------------------------------
    def evaluate(
        self, forward_inputs: Mapping[str, torch.Tensor], *, compute_values: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Recompute what ``predict`` sampled, with gradients.

        Args:
            forward_inputs: ``PolicyOutput.forward_inputs`` (possibly a minibatch of several rollouts).
            compute_values: also run the value head.

        Returns:
            ``(logprobs [B, C, A], entropy [B, C, A], values [B] or None)``, float32.
        """
        fi = {k: v.to(self.device) for k, v in forward_inputs.items()}
        hidden, critic_in = self._hidden_at_actions(fi)
        offsets = self.action_tokenizer.token_ids_to_offsets(fi["action_tokens"].flatten(1))
        logp, ent = action_logprobs_and_entropy(
            hidden, self._action_weight(), offsets, temperature=fi["temperature"], top_k=fi["top_k"]
        )
        shape = fi["action_tokens"].shape
        values = self._values(critic_in) if compute_values else None
        logp, ent = self._constant_dims_deterministic(logp.view(shape), ent.view(shape))
        return logp, ent, values

    def _constant_dims_deterministic(
        self, logprobs: torch.Tensor, entropy: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """With ``config.constant_dims_deterministic``, log-prob and entropy 0 (``[B, C, A]``) on the action
        dimensions whose statistics are constant: every bin decodes to the same action there."""
        if not getattr(self.config, "constant_dims_deterministic", False) or self.action_normalizer is None:
            return logprobs, entropy
        constant = self.action_normalizer.constant_dims.to(logprobs.device)
        zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
        return torch.where(constant, zero, logprobs), torch.where(constant, zero, entropy)

    def _sampling_tensors(
        self, b: int, mode: str, temperature: float, top_k: int | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if mode not in ("sample", "greedy"):
            raise ValueError(f"mode={mode!r} is not supported; allowed: ('sample', 'greedy')")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}")
        t = torch.full((b,), float(temperature), dtype=torch.float32, device=self.device)
        k = torch.full((b,), int(top_k or 0), dtype=torch.long, device=self.device)
        return t, k

    def _decode_actions(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Action token ids ``[B, C, A]`` -> env-unit actions float32 ``[B, C, A]``."""
        norm = self.action_tokenizer.token_ids_to_normalized(token_ids)
        return self.action_normalizer.unnormalize(norm) if self.action_normalizer is not None else norm

    def _finish(self, fi: dict[str, torch.Tensor]) -> PolicyOutput:
        logp, ent, values = self.evaluate(fi, compute_values=True)
        return PolicyOutput(
            actions=self._decode_actions(fi["action_tokens"]),
            logprobs=logp,
            values=values,
            forward_inputs=fi,
            entropy=ent,
        )

    def predict(
        self,
        obs: Mapping[str, Any],
        *,
        mode: str = "sample",
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: Generators = None,
    ) -> PolicyOutput:
        raise NotImplementedError

    def sft_loss(
        self, obs: Mapping[str, Any], expert_actions: torch.Tensor | Any
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Cross-entropy of the discretised expert actions over the action bins (supervised warm start).

        Args:
            obs: observation dict (batch ``B``).
            expert_actions: ``[B, C, A]`` in env units.

        Returns:
            ``(loss, metrics)`` with ``sft/loss``, ``sft/token_accuracy``, ``sft/l1_normalized``.
        """
        fi = self.prepare_inputs(obs)
        acts = torch.as_tensor(expert_actions, dtype=torch.float32, device=self.device)
        want = (fi["images"].shape[0], self.config.num_action_chunks, self.config.action_dim)
        if tuple(acts.shape) != want:
            raise ValueError(
                f"expert_actions must have shape [B, C, A] = {list(want)}, got {list(acts.shape)}"
            )
        norm = (
            self.action_normalizer.normalize(acts)
            if self.action_normalizer is not None
            else acts.clamp(-1, 1)
        )
        fi["action_tokens"] = self.action_tokenizer.normalized_to_token_ids(norm)
        hidden, _ = self._hidden_at_actions(fi)
        b = hidden.shape[0]
        ones = torch.ones(b, device=self.device)
        logits = action_logits(
            hidden, self._action_weight(), temperature=ones, top_k=torch.zeros_like(ones).long()
        )
        target = self.action_tokenizer.token_ids_to_offsets(fi["action_tokens"].flatten(1))
        loss = F.cross_entropy(logits.flatten(0, 1), target.flatten())
        with torch.no_grad():
            pred = logits.argmax(-1)
            acc = (pred == target).float().mean()
            pred_ids = self.action_tokenizer.offsets_to_token_ids(pred)
            l1 = (self.action_tokenizer.token_ids_to_normalized(pred_ids) - norm.flatten(1)).abs().mean()
        return loss, {
            "sft/loss": float(loss.detach()),
            "sft/token_accuracy": float(acc),
            "sft/l1_normalized": float(l1),
        }

    # ---- persistence --------------------------------------------------------------------------------------
    def save_pretrained(self, path: str, *, max_shard_bytes: int = 4 * 1024**3) -> None:
        """Write the OpenVLA checkpoint layout (LoRA merged) to ``path``; see
        ``vla_models.prismatic.checkpoint_prismatic``."""
        from vla_models.prismatic.checkpoint_prismatic import save_prismatic

        save_prismatic(self, path, max_shard_bytes=max_shard_bytes)

    @classmethod
    def from_pretrained(cls, path: str, **overrides: Any) -> PrismaticVLAPolicy:
        """Load a checkpoint directory written by ``save_pretrained`` or a published OpenVLA one."""
        from vla_models.checkpoint import load_policy

        policy = load_policy(path, **overrides)
        if not isinstance(policy, cls):
            raise TypeError(f"{path} holds a {type(policy).__name__}, not a {cls.__name__}")
        return policy
