"""What a lerobot pi0 / pi0.5 folder records, as ``OpenPiConfig`` fields.

A lerobot policy folder holds ``config.json`` (lerobot's ``PI0Config`` / ``PI05Config``), ``model.safetensors``
and its processor pipelines (``policy_preprocessor.json`` / ``policy_postprocessor.json``, whose normaliser steps
keep their statistics in ``policy_*processor*normalizer_processor.safetensors``). Every key of lerobot's config
is read here: the ones that decide what the policy computes become settings, the training-only ones are
listed and ignored, and a value this package cannot reproduce is refused with a message naming the key.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from safetensors.torch import load_file

from vla_models.checkpoint_files import json_kind, read_json

logger = logging.getLogger(__name__)

LEROBOT_TYPES = ("pi0", "pi05")
#: lerobot's normaliser epsilon (z-score ``std + eps``; quantiles use it only where ``q99 == q01``).
LEROBOT_NORM_EPS = 1e-8

#: lerobot config keys -> the OpenPiConfig field they set.
_SETTINGS = {
    "chunk_size": "action_horizon",
    "n_action_steps": "num_action_chunks",
    "num_inference_steps": "num_steps",
    "max_action_dim": "model_action_dim",
    "tokenizer_max_length": "max_token_len",
}
#: keys that only steer lerobot's training, logging or hub upload (they do not change the actions).
TRAINING_ONLY = frozenset(
    {
        "type",
        "device",
        "use_amp",
        "use_peft",
        "push_to_hub",
        "repo_id",
        "private",
        "tags",
        "license",
        "pretrained_path",
        "pretrained_revision",
        "time_sampling_beta_alpha",
        "time_sampling_beta_beta",
        "time_sampling_scale",
        "time_sampling_offset",
        "gradient_checkpointing",
        "compile_model",
        "compile_mode",
        "freeze_vision_encoder",
        "train_expert_only",
        "optimizer_lr",
        "optimizer_betas",
        "optimizer_eps",
        "optimizer_weight_decay",
        "optimizer_grad_clip_norm",
        "scheduler_warmup_steps",
        "scheduler_decay_steps",
        "scheduler_decay_lr",
        # the variant names size PaliGemma and the expert; the sizes are read from the tensors
        "paligemma_variant",
        "action_expert_variant",
        # counted among input_features' cameras
        "empty_cameras",
        # read with use_relative_actions
        "relative_exclude_joints",
        "action_feature_names",
    }
)
_DTYPES = {"float32": "fp32", "bfloat16": "bf16"}
_NORM_MODES = {"MEAN_STD": False, "QUANTILES": True}


def is_lerobot_config(d: dict[str, Any]) -> bool:
    return d.get("type") in LEROBOT_TYPES and "input_features" in d and "output_features" in d


def _refuse(folder: Path, key: str, value: Any, why: str) -> ValueError:
    return ValueError(f"{folder}/config.json: {key}={value!r} is not supported ({why})")


def lerobot_settings(folder: Path, d: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """``(OpenPiConfig fields, image size)`` that lerobot's ``config.json`` records.

    Raises:
        ValueError: a key this package does not know, or a value it cannot reproduce (named).
    """
    out: dict[str, Any] = {"pi05": d["type"] == "pi05"}
    handled = set(TRAINING_ONLY) | {"input_features", "output_features", "normalization_mapping"}
    for key, field in _SETTINGS.items():
        if key in d:
            out[field] = d[key]
    handled |= set(_SETTINGS)
    if "dtype" in d:
        if d["dtype"] not in _DTYPES:
            raise _refuse(folder, "dtype", d["dtype"], f"allowed: {sorted(_DTYPES)}")
        out["precision"] = _DTYPES[d["dtype"]]
    if d.get("max_state_dim", d.get("max_action_dim", 32)) != d.get("max_action_dim", 32):
        raise _refuse(
            folder, "max_state_dim", d.get("max_state_dim"), "the state is padded to max_action_dim here"
        )
    if d.get("n_obs_steps", 1) != 1:
        raise _refuse(folder, "n_obs_steps", d["n_obs_steps"], "one observation per decision")
    for key, default in (("min_period", 4e-3), ("max_period", 4.0)):
        if abs(float(d.get(key, default)) - default) > 1e-12:
            raise _refuse(folder, key, d[key], f"the time embedding's period is fixed at {default}")
    if d.get("use_relative_actions"):
        raise _refuse(
            folder,
            "use_relative_actions",
            True,
            "relative actions by joint name; set delta_action_mask on a folder without it",
        )
    if d.get("rtc_config") is not None:
        raise _refuse(folder, "rtc_config", d["rtc_config"], "real-time chunking is not implemented")
    handled |= {"dtype", "max_state_dim", "n_obs_steps", "min_period", "max_period"}
    handled |= {"use_relative_actions", "rtc_config", "image_resolution"}
    image_size = None
    if "image_resolution" in d:
        h, w = d["image_resolution"]
        if h != w:
            raise _refuse(folder, "image_resolution", d["image_resolution"], "square images only")
        image_size = int(h)
    cams = [k for k, f in d["input_features"].items() if f.get("type") == "VISUAL"]
    if cams:
        out["num_images_in_input"] = len(cams)
    actions = d["output_features"].get("action")
    if actions is None or actions.get("type") != "ACTION":
        raise _refuse(folder, "output_features", d["output_features"], "an 'action' feature is needed")
    out["action_dim"] = int(actions["shape"][0])
    modes = d.get("normalization_mapping", {})
    state_mode, action_mode = modes.get("STATE", "MEAN_STD"), modes.get("ACTION", "MEAN_STD")
    if state_mode not in _NORM_MODES or action_mode not in _NORM_MODES or state_mode != action_mode:
        raise _refuse(
            folder,
            "normalization_mapping",
            modes,
            f"STATE and ACTION must both be one of {sorted(_NORM_MODES)}",
        )
    out["use_quantile_norm"] = _NORM_MODES[state_mode]
    out["norm_style"] = "lerobot"
    out["discrete_state_input"] = out["pi05"]  # lerobot's pi0.5 writes the state into the prompt
    unknown = sorted(set(d) - handled)
    if unknown:
        raise ValueError(f"{folder}/config.json: lerobot keys {unknown} are not known to this loader")
    ignored = sorted(k for k in TRAINING_ONLY if k in d and k != "type")
    logger.info("%s: lerobot training settings not used for inference: %s", folder, ignored)
    return out, image_size


def _pipeline_steps(cfg: Path) -> list[dict[str, Any]]:
    """The ``steps`` of a lerobot processor file, each a JSON object (a file of another shape is named)."""
    d = read_json(cfg, expect=dict)
    steps = d.get("steps", [])
    if not isinstance(steps, list):
        raise ValueError(f"{cfg}: 'steps' holds a JSON {json_kind(steps)} where an array of steps belongs")
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            raise ValueError(f"{cfg}: steps[{i}] holds a JSON {json_kind(step)} where a step object belongs")
        if not isinstance(step.get("config", {}), dict):
            raise ValueError(
                f"{cfg}: steps[{i}].config holds a JSON {json_kind(step['config'])} where an object belongs"
            )
    return steps


def _normalizer_files(folder: Path) -> dict[str, Path]:
    """``{"policy_preprocessor": file, "policy_postprocessor": file}`` of the normaliser steps."""
    found: dict[str, Path] = {}
    for pipeline in ("policy_preprocessor", "policy_postprocessor"):
        cfg = folder / f"{pipeline}.json"
        if cfg.is_file():
            for step in _pipeline_steps(cfg):
                if step.get("registry_name") in ("normalizer_processor", "unnormalizer_processor"):
                    eps = step.get("config", {}).get("eps", LEROBOT_NORM_EPS)
                    if not isinstance(eps, (int, float)) or abs(float(eps) - LEROBOT_NORM_EPS) > 1e-15:
                        raise _refuse(
                            folder, f"{pipeline}.{step['registry_name']}.eps", eps, "lerobot's 1e-8"
                        )
                    name = step.get("state_file")
                    if name:
                        if not isinstance(name, str) or Path(name).name != name:
                            raise _refuse(folder, f"{pipeline}.state_file", name, "a file inside the folder")
                        found[pipeline] = folder / name
        else:
            files = sorted(folder.glob(f"{pipeline}*normalizer_processor.safetensors"))
            if files:
                found[pipeline] = files[0]
    return found


def _feature_dims(folder: Path) -> dict[str, int]:
    """``{"action": A, "observation.state": S}``: the sizes lerobot's ``config.json`` gives its features."""
    d = read_json(folder / "config.json", expect=dict)
    dims: dict[str, int] = {}
    for group in ("input_features", "output_features"):
        for name, feature in (d.get(group) or {}).items():
            shape = feature.get("shape") if isinstance(feature, dict) else None
            if name in ("action", "observation.state") and isinstance(shape, list) and len(shape) == 1:
                dims[name] = int(shape[0])
    return dims


def _statistics(file: Path, prefix: str, dim: int | None) -> dict[str, list[float]] | None:
    """The statistics of one feature (``prefix``: ``action.`` or ``observation.state.``) in a normaliser file:
    every vector finite and covering the feature's ``dim`` entries, or a one-line error naming file, key and
    shapes."""
    try:
        tensors = load_file(str(file))
    except Exception as e:  # safetensors raises its own error types for a cut or malformed file
        raise ValueError(f"{file} is not a readable safetensors file: {str(e).splitlines()[0]}") from None
    got: dict[str, list[float]] = {}
    for key, value in tensors.items():
        if not key.startswith(prefix):
            continue
        if value.ndim != 1 or not value.is_floating_point():
            raise ValueError(
                f"{file}: {key} has shape {list(value.shape)} and dtype {value.dtype}; a float vector belongs there"
            )
        if dim is not None and value.numel() < dim:
            raise ValueError(
                f"{file}: {key} has {value.numel()} entries, fewer than the {dim} of {prefix.rstrip('.')} "
                "that config.json declares"
            )
        if not bool(value.isfinite().all()):
            raise ValueError(
                f"{file}: {key} holds {int((~value.isfinite()).sum())} non-finite value(s) (NaN or inf)"
            )
        got[key.removeprefix(prefix)] = value.tolist()
    return got or None


def lerobot_norm_stats(folder: Path) -> dict[str, Any] | None:
    """openpi-layout statistics ``{"state": {...}, "actions": {...}}`` from lerobot's normaliser files (the
    pre-processor's for the state, the post-processor's for the actions), or None without them.

    Raises:
        ValueError: a normaliser file that is not safetensors, or statistics with NaN/inf or fewer entries than
            the feature's size in ``config.json`` (named: file, key, sizes).
    """
    files = _normalizer_files(folder)
    pre, post = files.get("policy_preprocessor"), files.get("policy_postprocessor")
    dims = _feature_dims(folder)

    def pick(prefix: str, order: list[Path | None]) -> dict[str, list[float]] | None:
        for file in order:
            if file is not None and (got := _statistics(file, prefix, dims.get(prefix.rstrip(".")))):
                return got
        return None

    actions = pick("action.", [post, pre])
    if actions is None:
        return None
    state = pick("observation.state.", [pre, post])
    return {"actions": actions, **({"state": state} if state is not None else {})}


def lerobot_tokenizer_name(folder: Path) -> str | None:
    """The tokenizer lerobot's pre-processor names (``tokenizer_processor.tokenizer_name``)."""
    cfg = folder / "policy_preprocessor.json"
    if not cfg.is_file():
        return None
    for step in _pipeline_steps(cfg):
        if step.get("registry_name") == "tokenizer_processor":
            name = step.get("config", {}).get("tokenizer_name")
            return name if isinstance(name, str) else None
    return None
