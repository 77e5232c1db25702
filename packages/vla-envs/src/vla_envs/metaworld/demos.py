"""MetaWorld's scripted experts (`metaworld.policies.ENV_POLICY_MAP`) recorded as demonstrations, in the shared demo
format of `vla_envs.demos`: the adapter record's demo source (`vla_envs/adapter_metaworld.py`).

Demos go through the very same observation pipeline as the env (`MetaWorldSim`: camera, size, 180° flip, fast
rendering, action repeat), so a policy trained on them sees the inputs it will see in `make_env`.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from vla_envs.config import EnvConfig
from vla_envs.demos import (
    DEMO_TRIAL_OFFSET,
    STEP_KEYS,
    Progress,
    record_step,
    run_demo_jobs,
    stack_steps,
    write_demos,
)


def _run_job(args: tuple[dict[str, Any], str, list[int]]) -> dict[str, Any]:
    """Worker: roll out the expert of `task` for the given trials. Returns stacked step arrays + episode info."""
    cfg_dict, task, trials = args
    from vla_envs.gl import configure_mujoco_gl

    configure_mujoco_gl()
    os.environ.setdefault("LP_NUM_THREADS", "1")
    import warnings

    warnings.filterwarnings("ignore", message="Constant\\(s\\) may be too high")
    from metaworld.policies import ENV_POLICY_MAP

    from vla_envs.metaworld.sim import MetaWorldSim
    from vla_envs.metaworld.tasks import TASK_DESCRIPTIONS

    cfg = EnvConfig.from_dict(cfg_dict)
    # one task, and trial ids far from the adapter's evaluation trials
    cfg = cfg.replace(num_trials_per_task=DEMO_TRIAL_OFFSET * 10)
    sim = MetaWorldSim(cfg, [task], goal_observable=True, cache_size=1)
    policy = ENV_POLICY_MAP[task]()
    steps: dict[str, list[Any]] = {k: [] for k in STEP_KEYS}
    episodes = []
    try:
        for trial in trials:
            obs = sim.reset(DEMO_TRIAL_OFFSET + trial)
            success = False
            length = 0
            for t in range(cfg.max_episode_steps):
                assert sim.raw_state is not None
                action = np.clip(policy.get_action(sim.raw_state), -1.0, 1.0).astype(np.float32)
                next_obs, reward, succ, _ = sim.step(action)
                record_step(steps, obs, action, reward, succ, episode=len(episodes), step=t)
                obs = next_obs
                length += 1
                if succ:
                    success = True
                    break
            episodes.append(
                {
                    "task": task,
                    "instruction": TASK_DESCRIPTIONS[task],
                    "trial": DEMO_TRIAL_OFFSET + trial,
                    "length": length,
                    "success": success,
                }
            )
    finally:
        sim.close()
    return {"arrays": stack_steps(steps), "episodes": episodes}


def generate_metaworld_demos(
    out_dir: str | os.PathLike[str],
    *,
    tasks: list[str],
    episodes_per_task: int,
    image_size: int = 64,
    camera: str | None = None,
    wrist_camera: str | None = None,
    action_repeat: int = 4,
    max_episode_steps: int = 50,
    reward_mode: str = "sparse",
    hide_far_meshes: bool = False,
    render_mesh_grid: float = 0.0,
    num_workers: int = 2,
    episodes_per_job: int = 5,
    start_method: str = "forkserver",
    seed: int = 0,
    progress: Progress = True,
) -> dict[str, Any]:
    """Roll out MetaWorld's scripted experts and write a demo directory (format in the module docstring).

    Args:
        out_dir: Output directory (created; existing shards there are overwritten).
        tasks: MetaWorld task names.
        episodes_per_task: Episodes per task.
        image_size, camera, wrist_camera, action_repeat, max_episode_steps, reward_mode: Same meaning as in
            `EnvConfig` (use the values of the env the policy will run in; camera None: MetaWorld's default).
        hide_far_meshes, render_mesh_grid: MetaWorld's `extra` keys of the same names (see
            `vla_envs.metaworld.options`).
        num_workers: Worker processes (0 = in this process).
        episodes_per_job: Episodes per work item (one shard each).
        start_method: multiprocessing start method.
        seed: Offsets the trial ids, so that different seeds give different goal variations.
        progress: A tqdm progress bar (True), none (False), or a bar factory (`Progress`).

    Returns:
        The metadata written to meta.json.
    """

    from vla_envs.metaworld.env import check_metaworld_installed, metaworld_spec

    if episodes_per_task < 1:
        raise ValueError(f"episodes_per_task={episodes_per_task} is invalid: must be >= 1")
    cfg = EnvConfig(
        env_type="metaworld",
        task_set=list(tasks),
        image_size=image_size,
        camera=camera,
        wrist_camera=wrist_camera,
        action_repeat=action_repeat,
        max_episode_steps=max_episode_steps,
        reward_mode=reward_mode,
        seed=seed,
        extra={"hide_far_meshes": hide_far_meshes, "render_mesh_grid": render_mesh_grid},
    )
    metaworld_spec(cfg)  # validates tasks and cameras with clear errors
    check_metaworld_installed()
    cfg_dict = dataclasses.asdict(cfg)
    cfg_dict["task_set"] = None
    jobs = []
    base = seed * episodes_per_task
    for task in tasks:
        trials = list(range(base, base + episodes_per_task))
        for k in range(0, len(trials), episodes_per_job):
            jobs.append((cfg_dict, task, trials[k : k + episodes_per_job]))

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = run_demo_jobs(
        _run_job, jobs, [len(job[2]) for job in jobs], desc="demos", num_workers=num_workers,
        start_method=start_method, progress=progress,
    )  # fmt: skip
    return write_demos(out, cfg, results)
