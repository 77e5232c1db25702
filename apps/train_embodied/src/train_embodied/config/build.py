"""The whole config -> `TrainConfig` (typed sections + vla_envs.EnvConfig), validated in one pass.

This is the app's edge: below it nothing sees omegaconf. Every problem found is reported at once, one line
each, naming the key (`algorithm.adv_type='gea' is not one of: gae, grpo`), before any simulator or model
is built.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from train_embodied.checkpointing import AUTO, ResumeError, find_latest_checkpoint
from train_embodied.config.aliases import apply_aliases
from train_embodied.config.convert import build_section, coerce_fields, unknown_key_errors
from train_embodied.config.sections import (
    ENV_APP_KEYS,
    ActorSection,
    AlgorithmSection,
    ClusterSection,
    EnvRunSection,
    ModelSection,
    RolloutSection,
    RunnerSection,
    SFTSection,
    TrainerSection,
)
from vla_algos import POLICY_LOSSES
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


@dataclass
class TrainConfig:
    """Everything a run needs, typed. `raw` is the resolved plain-dict config (saved next to the run)."""

    cluster: ClusterSection
    runner: RunnerSection
    algorithm: AlgorithmSection
    rollout: RolloutSection
    actor: ActorSection
    sft: SFTSection
    env_train: EnvConfig
    env_eval: EnvConfig
    train_run: EnvRunSection
    eval_run: EnvRunSection
    raw: dict[str, Any] = field(default_factory=dict)
    trainer: TrainerSection = field(default_factory=TrainerSection)

    @property
    def log_dir(self) -> str:
        """The run's folder (`runner.logger.log_dir`)."""
        return str(self.runner.logger.log_dir)


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


def _check_adapter_settings(env: EnvConfig, prefix: str) -> list[str]:
    """The adapter's own checks (task sets, cameras, `extra` keys, ...), run without building a simulator."""
    from vla_envs import check_env_config

    try:
        check_env_config(env)
    except (ValueError, TypeError, KeyError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        message = re.sub(r"\bEnvConfig\.", f"{prefix}.", message)
        return [message if prefix in message else f"{prefix}: {message}"]
    return []


def _check_env_offload(tc: TrainConfig) -> list[str]:
    """`env.<split>.enable_offload` (or `env.enable_offload`, both splits) for a simulator that cannot be offloaded:
    one line naming it and what is allowed."""
    from vla_envs import check_env_offload

    errors = []
    for name, env, run in (("env.train", tc.env_train, tc.train_run), ("env.eval", tc.env_eval, tc.eval_run)):
        if not run.enable_offload:
            continue
        try:
            check_env_offload(env)
        except (ValueError, TypeError, KeyError) as exc:
            why = re.sub(r"\bEnvConfig\.", f"{name}.", str(exc).strip().splitlines()[0])
            errors.append(
                f"{name}.enable_offload=True is not supported with env_type={env.env_type!r}: {why}"
            )
    return errors


def _check_task(env: EnvConfig, prefix: str) -> list[str]:
    """Check the task name against the adapter's task list when the adapter is importable."""
    if env.task is None:
        return []
    try:
        from vla_envs import list_tasks

        tasks = list_tasks(env.env_type)
    except Exception:  # adapter missing: make_env will say so at env creation
        return []
    if not tasks or env.task in tasks:
        return []
    close = difflib.get_close_matches(env.task, tasks, n=3)
    hint = (
        f"; did you mean: {', '.join(close)}"
        if close
        else f"; {len(tasks)} tasks, e.g. {', '.join(tasks[:5])}"
    )
    return [f"{prefix}.task={env.task!r} is not a {env.env_type} task{hint}"]


def _check_placement(cluster: ClusterSection) -> list[str]:
    try:
        from vla_infra import resolve_placement
    except ImportError:
        return []
    try:
        resolve_placement(
            dict(cluster.component_placement),
            num_nodes=cluster.num_nodes,
            num_gpus_per_node=cluster.num_gpus_per_node,
        )
    except (ValueError, TypeError, KeyError) as exc:
        return [f"cluster.component_placement={dict(cluster.component_placement)!r} is invalid: {exc}"]
    return []


def _check_actor_sharding(tc: TrainConfig) -> list[str]:
    """An actor on several processes is trained sharded (FSDP2): it needs one OS process per rank and FSDP. One
    actor process applies the fsdp_config settings to a plain module; those it cannot honour are refused."""
    try:
        from vla_infra import resolve_placement

        n = len(
            resolve_placement(
                dict(tc.cluster.component_placement),
                num_nodes=tc.cluster.num_nodes,
                num_gpus_per_node=tc.cluster.num_gpus_per_node,
            )["actor"]
        )
    except Exception:  # a bad placement is reported by _check_placement
        return []
    if n <= 1:
        from train_embodied.unsharded import one_process_errors

        return one_process_errors(tc.actor.fsdp_config, tc.actor.model.precision)
    errors = []
    where = f"cluster.component_placement gives the actor {n} processes"
    if tc.cluster.backend != "ray":
        errors.append(
            f"cluster.backend={tc.cluster.backend!r} is invalid: {where}, and sharded training needs one OS "
            "process per rank (the local backend runs every rank in this process): set cluster.backend=ray"
        )
    fsdp = tc.actor.fsdp_config
    if fsdp.strategy == "none":
        errors.append(
            f"actor.fsdp_config.strategy={fsdp.strategy!r} is invalid: {where}, which are trained sharded: "
            "set actor.fsdp_config.strategy=fsdp2 (or fsdp; both mean FSDP2), or place the actor on one process"
        )
    elif fsdp.sharding_strategy not in ("full_shard", "shard_grad_op"):
        errors.append(
            f"actor.fsdp_config.sharding_strategy={fsdp.sharding_strategy!r} is not supported with {n} actor "
            "processes: use full_shard or shard_grad_op"
        )
    return errors


def _check_gpus_here(cluster: ClusterSection) -> list[str]:
    """GPUs asked for vs CUDA GPUs of this machine, when every component runs here: the local backend, or a
    private one-node Ray instance (no `cluster.ray_address`). Otherwise the first model build fails deep inside
    torch ("Torch not compiled with CUDA enabled") after the env workers have started."""
    if cluster.num_gpus_per_node <= 0 or cluster.num_nodes != 1:
        return []
    if cluster.backend == "ray" and cluster.ray_address:
        return []
    import torch

    here = torch.cuda.device_count()
    if here >= cluster.num_gpus_per_node:
        return []
    where = (
        "the local backend" if cluster.backend != "ray" else "a private Ray instance (no cluster.ray_address)"
    )
    return [
        f"cluster.num_gpus_per_node={cluster.num_gpus_per_node!r} is invalid on this machine: it has {here} CUDA "
        f"GPU(s) and {where} runs every component here (for a CPU run set cluster.num_gpus_per_node=0 and "
        "cluster.component_placement={env,rollout,actor: all}; to use a Ray cluster set cluster.ray_address)"
    ]


def _cross_checks(tc: TrainConfig, *, check_paths: bool) -> list[str]:
    errors: list[str] = []
    algo, model = tc.algorithm, tc.actor.model
    # the registered estimator's and loss's properties decide, never their names (both names are valid here)
    estimator, loss = algo.estimator(), algo.loss()
    assert estimator is not None and loss is not None
    if loss.uses_critic and not model.add_value_head:
        errors.append(
            f"actor.model.add_value_head=False is invalid with algorithm.loss_type={algo.loss_type!r}: "
            "the critic is the value head (set actor.model.add_value_head=true or algorithm.loss_type to a loss "
            f"without a value term: {_names_without('uses_critic', POLICY_LOSSES)})"
        )
    if estimator.grouped_starts and tc.env_train.auto_reset:
        errors.append(
            f"env.train.auto_reset=True is invalid with algorithm.adv_type={algo.adv_type!r}: a group score is one "
            "episode per env (set env.train.auto_reset=false)"
        )
    if not estimator.grouped_starts and algo.filter_rewards and tc.env_train.auto_reset:
        errors.append(
            "env.train.auto_reset=True is invalid with algorithm.filter_rewards=true and "
            f"algorithm.adv_type={algo.adv_type!r}: a task's score is the mean of its env rows' first-episode scores, "
            "one episode per env (set env.train.auto_reset=false)"
        )
    if algo.n_chunk_steps is not None:
        decisions = tc.train_run.max_steps_per_rollout_epoch // model.num_action_chunks
        if algo.n_chunk_steps != decisions:
            errors.append(
                f"algorithm.n_chunk_steps={algo.n_chunk_steps!r} is invalid: the rollout takes "
                f"env.train.max_steps_per_rollout_epoch={tc.train_run.max_steps_per_rollout_epoch!r} / "
                f"actor.model.num_action_chunks={model.num_action_chunks!r} = {decisions} decisions per env "
                "(set one so that they agree, or leave algorithm.n_chunk_steps null)"
            )
    wandb = tc.trainer.logger.wandb
    if wandb.enable is False and "wandb" in tc.runner.logger.logger_backends:
        errors.append(
            "trainer.logger.wandb.enable=False conflicts with runner.logger.logger_backends="
            f"{tc.runner.logger.logger_backends!r}: they are one setting; give one of them"
        )
    stages = tc.rollout.pipeline_stage_num
    per_stage = tc.env_train.num_envs // stages
    whole_groups = not estimator.grouped_starts or per_stage % algo.group_size == 0
    if tc.env_train.num_envs % stages != 0 or not whole_groups:
        errors.append(
            f"env.train.num_envs={tc.env_train.num_envs!r} is invalid with rollout.pipeline_stage_num={stages!r}: "
            "each pipeline stage needs the same number of envs (and whole groups of algorithm.group_size="
            f"{algo.group_size!r} with algorithm.adv_type={algo.adv_type!r})"
        )
    if tc.train_run.max_steps_per_rollout_epoch % model.num_action_chunks != 0:
        errors.append(
            f"env.train.max_steps_per_rollout_epoch={tc.train_run.max_steps_per_rollout_epoch!r} is invalid: "
            f"must be a multiple of actor.model.num_action_chunks={model.num_action_chunks!r}"
        )
    # a policy built from scratch takes its image_size frames, unless its family resizes frames itself
    if not model.model_path and _fixed_image_size(model.model_type):
        for name, env in (("env.train", tc.env_train), ("env.eval", tc.env_eval)):
            if env.image_hw != (model.image_size, model.image_size):
                errors.append(
                    f"actor.model.image_size={model.image_size!r} does not match {name}.image_size="
                    f"{env.image_size!r} (the policy is built for the env's images)"
                )
    for name, env in (("env.train", tc.env_train), ("env.eval", tc.env_eval)):
        if env.first_row != 0:
            errors.append(
                f"{name}.first_row={env.first_row!r} is invalid: the trainer sets each env rank's and pipeline "
                "stage's first row itself (leave it 0)"
            )
        # (EnvConfig itself refuses a missing or unregistered env_type)
        errors += _check_task(env, name) or _check_adapter_settings(env, name)
    if not tc.rollout.do_sample and not tc.runner.only_eval:
        errors.append(
            f"rollout.do_sample={tc.rollout.do_sample!r} is not supported in a training run: training rollouts sample "
            "(the PPO/GRPO ratio needs the sampling distribution); greedy decisions are for evaluation "
            "(runner.only_eval=true with rollout.do_sample=false, or rollout.eval_do_sample=false, runner.eval_greedy)"
        )
    errors += _check_env_offload(tc)
    errors += _wrist_camera_contradictions(tc)
    errors += _check_placement(tc.cluster)
    errors += _check_actor_sharding(tc)
    if check_paths:  # checks against this machine
        errors += _check_gpus_here(tc.cluster)
        if tc.runner.resume_dir and tc.runner.resume_dir != AUTO:
            try:
                find_latest_checkpoint(tc.runner.resume_dir)
            except ResumeError as exc:
                errors.append(str(exc))
        if model.model_path and not os.path.isdir(model.model_path):
            errors.append(
                f"actor.model.model_path={model.model_path!r} is invalid: no such folder "
                "(a folder written by save_pretrained, e.g. the vla-sft output)"
            )
        elif model.model_path:
            errors += _check_model_folder(model)
    return errors


def _names_without(prop: str, registry: dict[str, Any]) -> str:
    """The registered names whose entry has `prop` unset, for messages."""
    return (
        ", ".join(name for name, entry in registry.items() if not getattr(entry, prop)) or "(none registered)"
    )


def _wrist_camera_contradictions(tc: TrainConfig) -> list[str]:
    """`wrist_camera` (ours) and RoboTwin's `task_config.camera.collect_wrist_camera` (the reference documents') say
    one thing: collect_wrist_camera true alone means both wrist cameras; a wrist camera with collect_wrist_camera
    false is refused, naming both."""
    errors = []
    for name, env in (("env.train", tc.env_train), ("env.eval", tc.env_eval)):
        camera = (env.extra.get("task_config") or {}).get("camera") or {}
        if env.wrist_camera is not None and camera.get("collect_wrist_camera") is False:
            errors.append(
                f"{name}.wrist_camera={env.wrist_camera!r} contradicts {name}.task_config.camera."
                "collect_wrist_camera=False: they are one setting (set collect_wrist_camera true, or wrist_camera "
                "null)"
            )
    return errors


def _fixed_image_size(model_type: str) -> bool:
    """Whether a policy of `model_type` built from scratch only takes frames of its image_size (an unknown
    model_type is reported by the model section)."""
    from vla_models import family_names, get_family

    return model_type in family_names() and get_family(model_type).fixed_image_size


def _check_model_folder(model: ModelSection) -> list[str]:
    """The model folder's small files against the `actor.model` settings (no tensor is read): malformed JSON,
    missing weights, a saved architecture the settings contradict."""
    from train_embodied.policy_io import load_settings
    from vla_models import check_checkpoint

    try:
        check_checkpoint(model.model_path, **load_settings(model))
    except (ValueError, FileNotFoundError) as exc:
        return [f"actor.model.model_path={model.model_path!r} is invalid: {exc}"]
    return []


def _apply_robot_platform(cfg: dict[str, Any]) -> list[str]:
    """`ROBOT_PLATFORM` (environment variable, as the reference documents export it) picks an OpenVLA-OFT policy's
    action and proprio normalisation (`actor.model.extra.normalization_type`) as the official code does; a config
    that names another one is refused, naming both."""
    platform = os.environ.get("ROBOT_PLATFORM", "").strip().upper()
    if not platform:
        return []
    if platform not in ROBOT_PLATFORM_NORMALIZATION:
        return [
            f"ROBOT_PLATFORM={platform!r} is not one of: {', '.join(ROBOT_PLATFORM_NORMALIZATION)} (unset it, or "
            "set actor.model.extra.normalization_type to bounds or bounds_q99)"
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
            f"selects {wanted!r}, as the official OpenVLA-OFT code does): unset one of them"
        ]
    model["extra"] = {**extra, "normalization_type": wanted}
    return []


def build_train_config(cfg: Mapping[str, Any], *, check_paths: bool = True) -> TrainConfig:
    """Validate the resolved plain-dict config and turn it into typed sections.

    Args:
        cfg: The composed config, resolved to plain containers (`OmegaConf.to_container(cfg, resolve=True)`).
        check_paths: Also check against this machine: `runner.resume_dir` and `actor.model.model_path` exist,
            and it has the GPUs `cluster` asks for when every component runs on it.

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
    errors = _cross_checks(tc, check_paths=check_paths)
    if errors:
        raise ConfigError(errors)
    return tc
