"""`make_maniskill_env(cfg)`: the registry entry point for `env_type="maniskill"`."""

from __future__ import annotations

from vla_envs.base import BatchedEnv
from vla_envs.config import EnvConfig
from vla_envs.maniskill import put_on_plate
from vla_envs.maniskill.options import resolve_options
from vla_envs.maniskill.runtime import ManiSkillUnavailableError, check_task
from vla_envs.sim import SimSpec

CPU_BUILDER = "vla_envs.maniskill.cpu_sim:build_maniskill_sims"


def make_maniskill_env(cfg: EnvConfig) -> BatchedEnv:
    """Build a batched ManiSkill3 env.

    `cfg.extra["sim_backend"]` picks the backend: "cpu" (default; one env per row in subprocess workers, via
    `vla_envs.vector.VectorEnv`) or "gpu" (`ManiSkillGPUEnv`, all rows in this process on CUDA).

    Raises:
        ValueError: invalid settings or unsupported task (the message lists the supported tasks).
        ManiSkillAssetsMissingError: the task needs assets that are not downloaded.
        ManiSkillUnavailableError: no usable Vulkan device (or no CUDA device for the GPU backend).
        ImportError: mani-skill is not installed.
    """
    opts = resolve_options(cfg)
    if opts.put_on_plate and (opts.sim_backend == "gpu" or cfg.envs_per_worker == 0):
        # built in this process: point ManiSkill and the task code at the assets before they are imported
        put_on_plate.prepare_process(*put_on_plate.asset_roots(opts.asset_dir))
    for task in opts.task_list:
        check_task(
            task,
            robot_uids=opts.robot_uids,
            allow_unlisted=opts.task_description is not None,
            asset_dir=opts.asset_dir,
        )
    if opts.sim_backend == "gpu":
        import torch

        if not torch.cuda.is_available():
            raise ManiSkillUnavailableError(
                "EnvConfig.extra['sim_backend']='gpu' needs a CUDA device (torch.cuda.is_available() is False); "
                "use sim_backend='cpu'"
            )
        from vla_envs.maniskill.gpu_env import ManiSkillGPUEnv

        return ManiSkillGPUEnv(cfg, opts)

    from vla_envs.vector import VectorEnv

    low, high = opts.action_bounds
    spec = SimSpec(
        builder=CPU_BUILDER,
        action_dim=opts.action_dim,
        action_low=low,
        action_high=high,
        tasks=opts.task_list,
    )
    if opts.put_on_plate:
        spec.options["asset_roots"] = tuple(str(p) for p in put_on_plate.asset_roots(opts.asset_dir))
    return VectorEnv(cfg, spec)  # a worker that finds no Vulkan device raises ManiSkillUnavailableError
