"""Checks across sections of a config whose sections are each valid: the algorithm against the model and envs,
shapes that several sections must agree on, placement and sharding, the env adapters' own settings, and (on
request) the GPUs of the machine the run starts on. Each problem is one line naming every key involved."""

from __future__ import annotations

import difflib
import re
from typing import Any

from train_embodied.config.sections import ClusterSection
from train_embodied.config.train_config import TrainConfig
from vla_algos import POLICY_LOSSES
from vla_envs import EnvConfig


def cross_checks(tc: TrainConfig, *, check_paths: bool) -> list[str]:
    """One line per contradiction between sections of a config whose sections are each valid; with `check_paths`
    also against this machine (its GPUs)."""
    errors = _algorithm_env_checks(tc) + _rollout_shape_checks(tc)
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
    if check_paths:
        errors += _machine_checks(tc)
    return errors


def _algorithm_env_checks(tc: TrainConfig) -> list[str]:
    """The algorithm against the model, the train env and the logger settings."""
    errors: list[str] = []
    algo, model = tc.algorithm, tc.actor.model
    # the registered estimator's and loss's properties decide, never their names (both names are valid here)
    estimator, loss = algo.estimator(), algo.loss()
    assert estimator is not None and loss is not None
    if loss.uses_critic and not model.add_value_head:
        errors.append(
            f"actor.model.add_value_head=False is invalid with algorithm.loss_type={algo.loss_type!r}: "
            "the critic is the value head: set `actor.model.add_value_head=true`, or algorithm.loss_type to a loss "
            f"without a value term ({_names_without('uses_critic', POLICY_LOSSES)})"
        )
    if estimator.grouped_starts and tc.env_train.auto_reset:
        errors.append(
            f"env.train.auto_reset=True is invalid with algorithm.adv_type={algo.adv_type!r}: a group score is one "
            "episode per env: set `env.train.auto_reset=false`"
        )
    if not estimator.grouped_starts and algo.filter_rewards and tc.env_train.auto_reset:
        errors.append(
            "env.train.auto_reset=True is invalid with algorithm.filter_rewards=true and "
            f"algorithm.adv_type={algo.adv_type!r}: a task's score is the mean of its env rows' first-episode scores, "
            "one episode per env: set `env.train.auto_reset=false`"
        )
    if algo.n_chunk_steps is not None:
        decisions = tc.train_run.max_steps_per_rollout_epoch // model.num_action_chunks
        if algo.n_chunk_steps != decisions:
            errors.append(
                f"algorithm.n_chunk_steps={algo.n_chunk_steps!r} is invalid: the rollout takes "
                f"env.train.max_steps_per_rollout_epoch={tc.train_run.max_steps_per_rollout_epoch!r} / "
                f"actor.model.num_action_chunks={model.num_action_chunks!r} = {decisions} decisions per env "
                "(set one so that they agree, or `algorithm.n_chunk_steps=null`)"
            )
    wandb = tc.trainer.logger.wandb
    if wandb.enable is False and "wandb" in tc.runner.logger.logger_backends:
        errors.append(
            "trainer.logger.wandb.enable=False conflicts with runner.logger.logger_backends="
            f"{tc.runner.logger.logger_backends!r}: they are one setting; give one of them"
        )
    return errors


def _rollout_shape_checks(tc: TrainConfig) -> list[str]:
    """Pipeline stages, chunks per rollout and image sizes that must agree across sections."""
    errors: list[str] = []
    algo, model = tc.algorithm, tc.actor.model
    estimator = algo.estimator()
    assert estimator is not None
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
    return errors


def _machine_checks(tc: TrainConfig) -> list[str]:
    """The config against this machine: the GPUs `cluster` asks for. What the run reads from disk (the run folder,
    the resume checkpoint, the model folder) is `train_embodied.preflight`'s."""
    return _check_gpus_here(tc.cluster)


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
            "process per rank (the local backend runs every rank in this process): set `cluster.backend=ray`"
        )
    fsdp = tc.actor.fsdp_config
    if fsdp.strategy == "none":
        errors.append(
            f"actor.fsdp_config.strategy={fsdp.strategy!r} is invalid: {where}, which are trained sharded: "
            "set `actor.fsdp_config.strategy=fsdp2` (or fsdp; both mean FSDP2), or place the actor on one process"
        )
    elif fsdp.sharding_strategy not in ("full_shard", "shard_grad_op"):
        errors.append(
            f"actor.fsdp_config.sharding_strategy={fsdp.sharding_strategy!r} is not supported with {n} actor "
            "processes: set `actor.fsdp_config.sharding_strategy=full_shard` or "
            "`actor.fsdp_config.sharding_strategy=shard_grad_op`"
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
        f"GPU(s) and {where} runs every component here: for a CPU run set "
        "`cluster.num_gpus_per_node=0 'cluster.component_placement={env\\,rollout\\,actor: all}'` (the commas "
        "escaped, the override quoted), or to use a Ray cluster set cluster.ray_address"
    ]


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
                f"collect_wrist_camera=False: they are one setting: set `{name}.task_config.camera."
                f"collect_wrist_camera=true` or `{name}.wrist_camera=null`"
            )
    return errors


def _fixed_image_size(model_type: str) -> bool:
    """Whether a policy of `model_type` built from scratch only takes frames of its image_size (an unknown
    model_type is reported by the model section)."""
    from vla_models import family_names, get_family

    return model_type in family_names() and get_family(model_type).fixed_image_size
