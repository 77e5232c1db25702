"""The whole config -> `TrainConfig` (typed sections + vla_envs.EnvConfig), validated in one pass.

This is the app's edge: below it nothing sees omegaconf. Every problem found is reported at once, one line
each, naming the key (`algorithm.adv_type='gea' is not one of: gae, grpo`), before any simulator or model
is built.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from typing import Any

from train_embodied.config.aliases import apply_aliases
from train_embodied.config.convert import build_section, coerce_fields, unknown_key_errors
from train_embodied.config.cross_checks import cross_checks
from train_embodied.config.sections import (
    ENV_APP_KEYS,
    ActorSection,
    AlgorithmSection,
    ClusterSection,
    EnvRunSection,
    RolloutSection,
    RunnerSection,
    SFTSection,
    TrainerSection,
)
from train_embodied.config.train_config import TrainConfig
from vla_envs import EnvConfig

TOP_LEVEL_SECTIONS = ["cluster", "runner", "algorithm", "env", "rollout", "actor", "sft", "trainer"]

#: `ROBOT_PLATFORM` values and the action / proprio normalisation the official OpenVLA-OFT code selects with them
#: (`prismatic/vla/constants.py`: ALOHA uses [min, max] bounds, the others [q01, q99]).
ROBOT_PLATFORM_NORMALIZATION = {"ALOHA": "bounds", "LIBERO": "bounds_q99", "BRIDGE": "bounds_q99"}


class ConfigError(ValueError):
    """Invalid configuration; `errors` holds one line per problem."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


def _env_config(
    data: Any, prefix: str, video_dir: str, errors: list[str]
) -> tuple[EnvConfig | None, EnvRunSection]:
    if not isinstance(data, Mapping):
        errors.append(f"{prefix}={data!r} is invalid: expected a section (mapping)")
        return None, EnvRunSection()
    app_part = {k: data[k] for k in ENV_APP_KEYS if k in data}
    run = build_section(EnvRunSection, app_part, prefix, errors)
    env_part = {k: copy.deepcopy(v) for k, v in data.items() if k not in ENV_APP_KEYS}
    if env_part.get("group_size", 0) is None:  # null: EnvConfig's (env.train's is algorithm.group_size)
        del env_part["group_size"]
    video = env_part.get("video_cfg")
    if isinstance(video, dict) and video.get("video_base_dir") is None:
        video["video_base_dir"] = video_dir
    from dataclasses import fields

    known = [f.name for f in fields(EnvConfig)] + ["video_cfg", *ENV_APP_KEYS]
    unknown = unknown_key_errors({k: v for k, v in env_part.items() if k != "video_cfg"}, known, prefix)
    if unknown:
        errors += unknown
        return None, run
    type_errors: list[str] = []
    env_part = coerce_fields(EnvConfig, env_part, prefix, type_errors, aliases={"video_cfg": "video"})
    if type_errors:  # wrong types first: EnvConfig's own checks compare values
        errors += type_errors
        return None, run
    try:
        return EnvConfig.from_dict(env_part), run
    except (ValueError, TypeError) as exc:
        # vla_envs says "EnvConfig.num_envs=0 is invalid: ..."; say which section it came from.
        message = re.sub(r"\bVideoConfig\.", f"{prefix}.video_cfg.", str(exc))
        errors.append(re.sub(r"\bEnvConfig\.", f"{prefix}.", message))
        return None, run


def _env_group_size(algorithm: AlgorithmSection, num_envs: Any, errors: list[str]) -> int:
    """The train env's same-start group size: `algorithm.group_size` (one setting; `env.train.group_size`, the
    reference's spelling, was moved there by `apply_aliases`). A size that does not divide the env rows is reported
    here, naming both keys (the env would name only its own)."""
    size = algorithm.group_size
    if not isinstance(size, int) or size < 1:  # reported by the algorithm section
        return 1
    if isinstance(num_envs, int) and num_envs >= 1 and num_envs % size != 0:
        errors.append(
            f"algorithm.group_size={size!r} is invalid: must divide env.train.num_envs={num_envs!r} (the train envs "
            "are split into groups of that many rows sharing a start state)"
        )
        return 1
    return size


def _apply_robot_platform(cfg: dict[str, Any]) -> list[str]:
    """`ROBOT_PLATFORM` (environment variable, as the reference documents export it) picks an OpenVLA-OFT policy's
    action and proprio normalisation (`actor.model.extra.normalization_type`) as the official code does; a config
    that names another one is refused, naming both."""
    platform = os.environ.get("ROBOT_PLATFORM", "").strip().upper()
    if not platform:
        return []
    if platform not in ROBOT_PLATFORM_NORMALIZATION:
        return [
            f"ROBOT_PLATFORM={platform!r} is not one of: {', '.join(ROBOT_PLATFORM_NORMALIZATION)}: run "
            "`unset ROBOT_PLATFORM` (or export one of those)"
        ]
    from vla_models import family_names, get_family

    model = cfg.get("actor", {}).get("model", {})
    if not isinstance(model, dict) or model.get("model_type") not in family_names():
        return []
    if not get_family(model["model_type"]).reads_robot_platform:
        return []
    wanted = ROBOT_PLATFORM_NORMALIZATION[platform]
    extra = model.get("extra") or {}
    given = extra.get("normalization_type")
    if given is not None and given != wanted:
        return [
            f"actor.model.extra.normalization_type={given!r} conflicts with ROBOT_PLATFORM={platform} (which "
            f"selects {wanted!r}, as the official OpenVLA-OFT code does): run `unset ROBOT_PLATFORM`, or drop "
            "the setting with `~actor.model.extra.normalization_type`"
        ]
    model["extra"] = {**extra, "normalization_type": wanted}
    return []


def build_train_config(cfg: Mapping[str, Any], *, check_paths: bool = True) -> TrainConfig:
    """Validate the resolved plain-dict config and turn it into typed sections.

    Args:
        cfg: The composed config, resolved to plain containers (`OmegaConf.to_container(cfg, resolve=True)`).
        check_paths: Also check against this machine: it has the GPUs `cluster` asks for when every component
            runs on it. What a run reads from disk (run folder, resume checkpoint, model folder) is checked by
            `train_embodied.preflight`, once, by the command line.

    Raises:
        ConfigError: one line per problem.
    """
    cfg, errors = apply_aliases(cfg)  # the reference documents' spellings -> their home here
    errors += [e.replace("'<root>.", "'") for e in unknown_key_errors(cfg, TOP_LEVEL_SECTIONS, "<root>")]
    trainer = build_section(TrainerSection, cfg.get("trainer", {}), "trainer", errors)
    if trainer.logger.wandb.enable and "wandb" not in cfg.get("runner", {}).get("logger", {}).get(
        "logger_backends", []
    ):
        runner_logger = cfg.setdefault("runner", {}).setdefault("logger", {})
        runner_logger["logger_backends"] = [*runner_logger.get("logger_backends", ["tensorboard"]), "wandb"]
    errors += _apply_robot_platform(cfg)
    runner = build_section(RunnerSection, cfg.get("runner", {}), "runner", errors)
    cluster = build_section(ClusterSection, cfg.get("cluster", {}), "cluster", errors)
    algorithm = build_section(AlgorithmSection, cfg.get("algorithm", {}), "algorithm", errors)
    rollout = build_section(RolloutSection, cfg.get("rollout", {}), "rollout", errors)
    actor = build_section(ActorSection, cfg.get("actor", {}), "actor", errors)
    sft = build_section(SFTSection, cfg.get("sft", {}), "sft", errors)
    env = cfg.get("env", {})
    errors += unknown_key_errors(env, ["train", "eval"], "env")
    log_dir = runner.logger.log_dir or "<log_dir>"
    train = env.get("train", {})
    if isinstance(train, Mapping):
        train = {**train, "group_size": _env_group_size(algorithm, train.get("num_envs"), errors)}
    env_train, train_run = _env_config(train, "env.train", f"{log_dir}/video/train", errors)
    env_eval, eval_run = _env_config(env.get("eval", {}), "env.eval", f"{log_dir}/video/eval", errors)
    if errors or env_train is None or env_eval is None:
        raise ConfigError(errors or ["env.train / env.eval are invalid"])
    tc = TrainConfig(
        cluster=cluster,
        runner=runner,
        algorithm=algorithm,
        rollout=rollout,
        actor=actor,
        sft=sft,
        env_train=env_train,
        env_eval=env_eval,
        train_run=train_run,
        eval_run=eval_run,
        raw=dict(cfg),
        trainer=trainer,
    )
    errors = cross_checks(tc, check_paths=check_paths)
    if errors:
        raise ConfigError(errors)
    return tc
