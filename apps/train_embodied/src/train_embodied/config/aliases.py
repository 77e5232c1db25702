"""Keys the reference documents spell differently from this project: each is accepted and means one thing here.

| reference documents' key                     | home here                                            |
|----------------------------------------------|------------------------------------------------------|
| `rollout.model.model_path`                   | `actor.model.model_path` (the rollout runs the actor's policy, synced every iteration) |
| `env.train.assets_path`, `.task_config`, `.center_crop` (and `env.eval.*`) | `env.<split>.extra.*` (RoboTwin adapter options) |
| `fsdp.<key>`                                 | `actor.fsdp_config.<key>`                            |
| `video_cfg.<key>` at the top level           | `env.train.video_cfg.<key>` (the documents' folders end in `video/train`) |
| `env.train.rollout_epoch`                    | `algorithm.rollout_epoch` (rollouts per training iteration) |
| `algorithm.eval_rollout_epoch` (deprecated there) | `env.eval.rollout_epoch` (times an evaluation runs its episodes) |
| `trainer.logger.wandb.enable`                | `"wandb"` in `runner.logger.logger_backends`         |
| `trainer.logger.wandb.project_name` / `experiment_name` | the project and run name the wandb backend reports to |
| `env/train=NAME`, `env/eval=NAME` (overrides, defaults lists) | `env@env.train=NAME`, `env@env.eval=NAME`    |
| `env.train.group_size`                       | `algorithm.group_size` (envs per same-start group: the estimator's group and the env's) |
| `env.enable_offload`                         | `env.train.enable_offload` and `env.eval.enable_offload` (the reference's per-split keys) |

A key given in the documents' spelling is applied over the config's own (the shipped configs never use those
spellings, so a value there is the user's). Given both ways with different values on one command line, or inside
one config file, the run is refused with one line naming both; the same value both ways is one setting.
`env.train.group_size` is refused whenever it differs from `algorithm.group_size` (whose default is always in
the composed config): the env's groups are the estimator's. One key the reference reads is checked, not stored:
`algorithm.n_chunk_steps` (decisions per rollout epoch) must agree with the env and model settings.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

#: Keys of `env.train` / `env.eval` that the reference documents put at the section's top level and this project
#: keeps in the adapter's `extra` options.
ENV_EXTRA_ALIASES = ("assets_path", "task_config", "center_crop")

#: (documents' key, our key) pairs that one command line may not set to different values.
OVERRIDE_ALIASES: tuple[tuple[str, str], ...] = (
    ("rollout.model.model_path", "actor.model.model_path"),
    *(
        (f"fsdp.{k}", f"actor.fsdp_config.{k}")
        for k in ("strategy", "sharding_strategy", "gradient_checkpointing", "cpu_offload", "mixed_precision")
    ),
    ("env.train.rollout_epoch", "algorithm.rollout_epoch"),
    ("algorithm.eval_rollout_epoch", "env.eval.rollout_epoch"),
    *(
        (f"video_cfg.{k}", f"env.train.video_cfg.{k}")
        for k in ("save_video", "info_on_video", "video_base_dir", "fps", "max_envs")
    ),
    ("env.train.group_size", "algorithm.group_size"),
    ("env.enable_offload", "env.train.enable_offload"),
    ("env.enable_offload", "env.eval.enable_offload"),
)

#: Every (documents' key, our key) pair that one config file may not set to different values.
FILE_ALIASES: tuple[tuple[str, str], ...] = (
    *OVERRIDE_ALIASES,
    *(
        (f"env.{split}.{k}", f"env.{split}.extra.{k}")
        for split in ("train", "eval")
        for k in ENV_EXTRA_ALIASES
    ),
)

_ABSENT = object()


def _select(data: Any, key: str) -> Any:
    """The value at dotted `key` of nested mappings, or `_ABSENT`."""
    for part in key.split("."):
        if not isinstance(data, Mapping) or part not in data:
            return _ABSENT
        data = data[part]
    return data


def file_conflicts(data: Any, source: str) -> list[str]:
    """One line per documents' key and our key that the config file `source` (its own contents `data`, before
    composition) sets to different values; null means unset."""
    errors = []
    for theirs, ours in FILE_ALIASES:
        a, b = _select(data, theirs), _select(data, ours)
        if a is _ABSENT or b is _ABSENT or a is None or b is None or a == b:
            continue
        errors.append(
            f"{theirs}={a!r} conflicts with {ours}={b!r} in {source}: they are one setting ({ours} is this "
            "project's name for it); give one of them"
        )
    return errors


def rewrite_override(item: str) -> str:
    """One command-line override in the documents' spelling -> ours (`env/train=X` -> `env@env.train=X`,
    `env.train.center_crop=false` -> `env.train.extra.center_crop=false`); anything else unchanged."""
    if "=" not in item:
        return item
    key, value = item.split("=", 1)
    prefix = ""
    while key[:1] in "+~" and key:
        prefix, key = prefix + key[0], key[1:]
    if key in ("env/train", "env/eval"):
        return f"{prefix}env@env.{key.split('/')[1]}={value}"
    parts = key.split(".")
    if (
        len(parts) >= 3
        and parts[0] == "env"
        and parts[1] in ("train", "eval")
        and parts[2] in ENV_EXTRA_ALIASES
    ):
        return f"{prefix}{'.'.join([*parts[:2], 'extra', *parts[2:]])}={value}"
    return item


def override_conflicts(overrides: list[str]) -> list[str]:
    """One line per documents' key and our key set to different values on the same command line."""
    given: dict[str, str] = {}
    spelled: dict[str, str] = {}  # our key -> how the command line spelled it
    errors = []
    for item in overrides:
        if "=" not in item:
            continue
        key, value = item.split("=", 1)
        ours, _ = rewrite_override(item).split("=", 1)
        ours, key = ours.lstrip("+~"), key.lstrip("+~")
        if ours in spelled and spelled[ours] != key and given[ours] != value.strip():
            errors.append(
                f"{key}={value.strip()} conflicts with {spelled[ours]}={given[ours]}: they are one setting "
                f"({ours} is this project's name for it); give one of them"
            )
        given[key] = given[ours] = value.strip()
        spelled.setdefault(ours, key)
    for theirs, ours in OVERRIDE_ALIASES:
        if theirs in given and ours in given and given[theirs] != given[ours]:
            errors.append(
                f"{theirs}={given[theirs]} conflicts with {ours}={given[ours]}: they are one setting "
                f"({ours} is this project's name for it); give one of them"
            )
    return errors


def _merge_over(base: Any, top: Mapping[str, Any]) -> dict[str, Any]:
    """`top` applied over mapping `base` key by key (nested mappings merged, None in `top` means unset)."""
    out = dict(base) if isinstance(base, Mapping) else {}
    for key, value in top.items():
        if value is None:
            continue
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge_over(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def apply_aliases(cfg: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The resolved plain config with every documents' spelling moved to its home here, and one error line per
    key that cannot apply. Returns (config, errors); the input is not modified."""
    out = copy.deepcopy(dict(cfg))
    errors: list[str] = []

    rollout = out.get("rollout")
    if isinstance(rollout, dict) and "model" in rollout:
        model = rollout.pop("model")
        if not isinstance(model, Mapping):
            errors.append(f"rollout.model={model!r} is invalid: expected a section with model_path")
        else:
            for key in model:
                if key != "model_path":
                    errors.append(
                        f"unknown key 'rollout.model.{key}': rollout.model takes model_path only (the rollout "
                        "runs the actor's policy; set the model under actor.model)"
                    )
            if model.get("model_path") is not None:
                actor = out.setdefault("actor", {})
                actor.setdefault("model", {})["model_path"] = model["model_path"]

    fsdp = out.pop("fsdp", None)
    if isinstance(fsdp, Mapping):
        actor = out.setdefault("actor", {})
        actor["fsdp_config"] = _merge_over(actor.get("fsdp_config", {}), fsdp)
    elif fsdp is not None:
        errors.append(f"fsdp={fsdp!r} is invalid: expected a section (the keys of actor.fsdp_config)")

    video = out.pop("video_cfg", None)
    if isinstance(video, Mapping):
        env = out.setdefault("env", {})
        train = env.setdefault("train", {})
        if isinstance(train, dict):
            train["video_cfg"] = _merge_over(train.get("video_cfg", {}), video)
    elif video is not None:
        errors.append(f"video_cfg={video!r} is invalid: expected a section (the keys of env.train.video_cfg)")

    _move_rollout_epochs(out)
    env = out.get("env")
    train = env.get("train") if isinstance(env, dict) else None
    group_size = train.pop("group_size", None) if isinstance(train, dict) else None
    if group_size is not None:  # one setting: the env's same-start groups are the estimator's groups
        algorithm = out.setdefault("algorithm", {})
        given = algorithm.get("group_size") if isinstance(algorithm, dict) else None
        if given is not None and given != group_size:
            errors.append(
                f"env.train.group_size={group_size!r} conflicts with algorithm.group_size={given!r}: they are one "
                "setting (algorithm.group_size is this project's name for it: the envs of a group share a start "
                "state); give one of them"
            )
        elif isinstance(algorithm, dict):
            algorithm["group_size"] = group_size
    if isinstance(env, dict):
        offload = env.pop("enable_offload", None)
        if offload is not None and not isinstance(offload, bool):
            errors.append(f"env.enable_offload={offload!r} is invalid: expected true or false")
        elif offload is not None:
            for split in ("train", "eval"):
                if isinstance(env.get(split), dict):
                    env[split]["enable_offload"] = offload
        for split in ("train", "eval"):
            section = env.get(split)
            if not isinstance(section, dict):
                continue
            moved = {k: section.pop(k) for k in ENV_EXTRA_ALIASES if k in section}
            moved = {k: v for k, v in moved.items() if v is not None}
            if moved:
                section["extra"] = _merge_over(section.get("extra") or {}, moved)
    return out, errors


def _move_rollout_epochs(out: dict[str, Any]) -> None:
    """`env.train.rollout_epoch` -> `algorithm.rollout_epoch` and `algorithm.eval_rollout_epoch` ->
    `env.eval.rollout_epoch` (the reference's two spellings of each), in place."""
    env = out.get("env")
    train = env.get("train") if isinstance(env, dict) else None
    if isinstance(train, dict) and "rollout_epoch" in train:
        value = train.pop("rollout_epoch")
        if value is not None:
            out.setdefault("algorithm", {})["rollout_epoch"] = value
    algorithm = out.get("algorithm")
    if isinstance(algorithm, dict) and "eval_rollout_epoch" in algorithm:
        value = algorithm.pop("eval_rollout_epoch")
        if value is not None:
            env = out.setdefault("env", {})
            if isinstance(env, dict) and isinstance(env.setdefault("eval", {}), dict):
                env["eval"]["rollout_epoch"] = value
