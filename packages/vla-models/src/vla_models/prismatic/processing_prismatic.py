"""Turns a vla_envs observation dict into model inputs (prompt ids, images, states); numpy or torch in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase


def _as_tensor(x: Any, name: str) -> torch.Tensor:
    if x is None:
        raise ValueError(f"observation key {name!r} is required but is None")
    return x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))


class OpenVLAProcessor:
    """Prompt building / tokenization and image stacking for OpenVLA and OpenVLA-OFT.

    Args:
        tokenizer: text tokenizer whose vocabulary ends with the action tokens.
        prompt_template: contains ``{instruction}``.
        prompt_suffix_token_ids: ids appended to every prompt (OpenVLA: the empty token 29871).
        pad_token_id: id used to left-pad the prompts.
        num_images: cameras per sample (1 = ``images``; more adds ``wrist_images[:, :num_images - 1]``).
        proprio_dim: expected ``states`` size, or None when states are not used.
        prompt_length: fixed prompt width (left padding), or None for the batch's longest prompt.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        prompt_template: str,
        prompt_suffix_token_ids: tuple[int, ...],
        pad_token_id: int,
        num_images: int = 1,
        proprio_dim: int | None = None,
        prompt_length: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.prompt_template = prompt_template
        self.prompt_suffix_token_ids = tuple(prompt_suffix_token_ids)
        self.pad_token_id = pad_token_id
        self.num_images = num_images
        self.proprio_dim = proprio_dim
        self.prompt_length = prompt_length
        self._cache: dict[str, list[int]] = {}

    def prompt_ids(self, instruction: str) -> list[int]:
        """Token ids of the prompt *after* BOS (the model inserts BOS and the image tokens before them)."""
        if instruction not in self._cache:
            # lower-cased only, as OpenVLA's processor does: spaces and a trailing period stay
            text = self.prompt_template.format(instruction=instruction.lower())
            ids = list(self.tokenizer.encode(text, add_special_tokens=False)) + list(
                self.prompt_suffix_token_ids
            )
            self._cache[instruction] = ids
        return self._cache[instruction]

    def __call__(self, obs: Mapping[str, Any], device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """Observation dict -> ``input_ids`` int64 ``[B, L]`` (left-padded), ``text_mask`` bool ``[B, L]``,
        ``images`` uint8 ``[B, N_img, H, W, 3]`` and, with proprio, ``states`` float32 ``[B, D]``."""
        if "images" not in obs:
            raise ValueError(f"observation needs key 'images'; got keys {sorted(obs)}")
        images = _as_tensor(obs["images"], "images")
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[-1] != 3:
            raise ValueError(
                f"obs['images'] must be uint8 [B, H, W, 3], got {images.dtype} {tuple(images.shape)}"
            )
        b = images.shape[0]
        cams = [images.unsqueeze(1)]
        if self.num_images > 1:
            wrist = obs.get("wrist_images")
            if wrist is None:
                raise ValueError(f"num_images_in_input={self.num_images} needs obs['wrist_images'], got None")
            wrist = _as_tensor(wrist, "wrist_images")
            if (
                wrist.dtype != torch.uint8
                or wrist.ndim != 5
                or wrist.shape[0] != b
                or wrist.shape[1] < self.num_images - 1
                or wrist.shape[2:] != images.shape[1:]
            ):
                raise ValueError(
                    f"obs['wrist_images'] must be uint8 [B, K>={self.num_images - 1}, H, W, 3] matching images "
                    f"{tuple(images.shape)}, got {wrist.dtype} {tuple(wrist.shape)}"
                )
            cams.append(wrist[:, : self.num_images - 1])
        out: dict[str, torch.Tensor] = {"images": torch.cat(cams, dim=1).contiguous()}

        tasks = obs.get("task_descriptions")
        if tasks is None or len(tasks) != b:
            raise ValueError(f"obs['task_descriptions'] must be a list of {b} strings, got {tasks!r:.80}")
        ids = [self.prompt_ids(str(t)) for t in tasks]
        length = max(len(x) for x in ids)
        if self.prompt_length is not None:
            if length > self.prompt_length:
                longest = tasks[max(range(b), key=lambda i: len(ids[i]))]
                raise ValueError(
                    f"prompt_length={self.prompt_length} is shorter than the {length} tokens of the prompt for "
                    f"task {longest!r}; raise prompt_length in the model config"
                )
            length = self.prompt_length
        input_ids = torch.full((b, length), self.pad_token_id, dtype=torch.long)
        text_mask = torch.zeros((b, length), dtype=torch.bool)
        for i, x in enumerate(ids):
            input_ids[i, length - len(x) :] = torch.tensor(x, dtype=torch.long)
            text_mask[i, length - len(x) :] = True
        out["input_ids"], out["text_mask"] = input_ids, text_mask

        if self.proprio_dim is not None:
            states = _as_tensor(obs.get("states"), "states").float()
            if states.shape != (b, self.proprio_dim):
                raise ValueError(
                    f"obs['states'] must be float [B={b}, proprio_dim={self.proprio_dim}], got {tuple(states.shape)}"
                )
            out["states"] = states
        return {k: v.to(device) for k, v in out.items()}
