"""Demonstrations of RoboTwin's own task expert (`play_once`), in the shared demo format of `vla_envs.demos`.

For every demo start (trial `DEMO_TRIAL_OFFSET + seed * episodes + k`, RoboTwin seed `seed_base` + that trial, so
demos never reuse a start of training or evaluation), a worker process builds the env exactly as the adapter does
(`make_robotwin_env` of the run's env config: task, assets, camera, crop, image size) and:

1. resets to the start and runs RoboTwin's `play_once` there, recording the commanded joint path
   (`RoboTwinProcess.expert`), cut into waypoints (`expert.waypoints_from_path`);
2. resets to the same start (RoboTwin seeds the scene from the seed) and replays the waypoints through the
   adapter's `chunk_step`, one RoboTwin step per waypoint, recording the observation before each, the waypoint as
   the action, the reward and RoboTwin's success.

Replaying one waypoint per step observes every waypoint, so a policy of any chunk size C learns chunk i..i+C-1 from
the observation at waypoint i. An episode stops at its first success or after `max_episode_steps` waypoints;
episodes whose expert or replay failed are kept and marked `success: false` (`expert_success` says whether
`play_once` itself succeeded).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from vla_envs.config import EnvConfig
from vla_envs.demos import DEMO_TRIAL_OFFSET, STEP_KEYS, run_demo_jobs, stack_steps, write_demos
from vla_envs.robotwin.expert import MAX_JOINT_STEP, waypoints_from_path

# The EnvConfig fields that shape what a demo observes and does (the others size or schedule the run's envs).
DEMO_FIELDS = (
    "env_type", "task", "image_size", "camera", "wrist_camera", "max_episode_steps", "reward_mode",
    "action_out_of_range", "action_tolerance", "extra",
)  # fmt: skip


def robotwin_demo_settings(cfg: EnvConfig, *, episodes_per_task: int, seed: int = 0) -> dict[str, Any]:
    """The keywords of `generate_robotwin_demos` that record demos as env `cfg` observes and acts: its task,
    RoboTwin options (`extra`), image size, cameras and episode length (`DEMO_FIELDS`)."""
    from vla_envs.robotwin.options import resolve_options

    resolve_options(cfg)  # validates the task and options
    full = dataclasses.asdict(cfg)
    env = {k: list(v) if isinstance(v, tuple) else v for k, v in full.items() if k in DEMO_FIELDS}
    return {"env": env, "episodes_per_task": int(episodes_per_task), "seed": int(seed)}


def _demo_config(env: dict[str, Any]) -> EnvConfig:
    """One env, one RoboTwin step per waypoint, episodes held at their end, demo trial ids allowed."""
    cfg = EnvConfig.from_dict({k: v for k, v in env.items() if k in DEMO_FIELDS})
    extra = {**cfg.extra, "chunk_execution": "position"}
    return cfg.replace(
        num_envs=1,
        envs_per_worker=0,
        auto_reset=False,
        ignore_terminations=False,
        use_fixed_reset_state_ids=False,
        num_trials_per_task=DEMO_TRIAL_OFFSET * 10,
        extra=extra,
    )


def record_episode(env: Any, trial: int, *, max_joint_step: float = MAX_JOINT_STEP) -> dict[str, Any]:
    """Run the expert from start `trial` of a one-env RoboTwinEnv and replay its waypoints (module docstring).

    Returns:
        `steps`: per-step lists (STEP_KEYS but `episode_index`), `success`, `expert_success`, `expert_error`,
        `num_waypoints`.
    """
    env.reset(reset_state_ids=[trial])
    expert = env.expert_paths([0])[0]
    waypoints = waypoints_from_path(expert["path"], max_joint_step=max_joint_step)
    obs = env.reset(reset_state_ids=[trial])
    steps: dict[str, list[Any]] = {k: [] for k in STEP_KEYS if k != "episode_index"}
    success = False
    for t, action in enumerate(waypoints[: env.cfg.max_episode_steps]):
        res = env.chunk_step(action[None, None, :])
        steps["images"].append(obs["images"][0])
        steps["wrist_images"].append(None if obs["wrist_images"] is None else obs["wrist_images"][0])
        steps["states"].append(obs["states"][0])
        steps["actions"].append(action)
        steps["rewards"].append(np.float32(res.rewards[0, -1]))
        steps["successes"].append(np.uint8(res.infos["success"][0, -1]))
        steps["step_index"].append(t)
        obs = res.obs
        if res.infos["success"][0, -1]:
            success = True
            break
        if res.final_mask[0]:
            break
    return {
        "steps": steps,
        "success": success,
        "expert_success": bool(expert["success"]),
        "expert_error": expert["error"],
        "num_waypoints": len(waypoints),
        "instruction": str(obs["task_descriptions"][0]),
    }


def _run_job(args: tuple[dict[str, Any], list[int]]) -> dict[str, Any]:
    """Worker: the demos of `trials` in one RoboTwin env; stacked step arrays and episode info."""
    env_dict, trials = args
    from vla_envs.robotwin.env import make_robotwin_env

    cfg = _demo_config(env_dict)
    env = make_robotwin_env(cfg)
    steps: dict[str, list[Any]] = {k: [] for k in STEP_KEYS}
    episodes = []
    try:
        for trial in trials:
            demo_trial = DEMO_TRIAL_OFFSET + trial
            ep = record_episode(env, demo_trial)
            for key, values in ep["steps"].items():
                steps[key].extend(values)
            steps["episode_index"].extend([len(episodes)] * len(ep["steps"]["actions"]))
            episodes.append(
                {
                    "task": env.opts.task,
                    "instruction": ep["instruction"],
                    "trial": demo_trial,
                    "robotwin_seed": env.robotwin_seed(demo_trial),
                    "length": len(ep["steps"]["actions"]),
                    "success": ep["success"],
                    "expert_success": ep["expert_success"],
                    "expert_error": ep["expert_error"],
                    "num_waypoints": ep["num_waypoints"],
                }
            )
    finally:
        env.close()
    if not steps["actions"]:
        return {"arrays": None, "episodes": episodes}
    return {"arrays": stack_steps(steps), "episodes": episodes}


def generate_robotwin_demos(
    out_dir: str | os.PathLike[str],
    *,
    env: dict[str, Any],
    episodes_per_task: int,
    seed: int = 0,
    num_workers: int = 2,
    episodes_per_job: int | None = None,
    start_method: str = "forkserver",
    progress: bool = True,
) -> dict[str, Any]:
    """Run RoboTwin's expert (module docstring) and write a demo directory; returns its metadata.

    Args:
        out_dir: Output directory (created; existing shards there are overwritten).
        env: The env config as a dict (`robotwin_demo_settings` takes it from the run's env section).
        episodes_per_task: Episodes to record (failures included).
        seed: Demo k starts from trial DEMO_TRIAL_OFFSET + seed * episodes_per_task + k.
        num_workers: Worker processes, each with its own RoboTwin process (0 = in this process).
        episodes_per_job: Episodes per work item (one shard and one RoboTwin process each: building one and
            rendering its first frame takes 20-60 s); None: the episodes split evenly over the workers.
        start_method: multiprocessing start method.
        progress: Show a tqdm progress bar.
    """
    if episodes_per_task < 1:
        raise ValueError(f"episodes_per_task={episodes_per_task} is invalid: must be >= 1")
    cfg = _demo_config(env)
    from vla_envs.robotwin.options import resolve_options

    resolve_options(cfg)
    base = seed * episodes_per_task
    trials = list(range(base, base + episodes_per_task))
    per_job = episodes_per_job or -(-len(trials) // max(1, num_workers))
    jobs = [(env, trials[k : k + per_job]) for k in range(0, len(trials), per_job)]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = run_demo_jobs(
        _run_job, jobs, [len(job[1]) for job in jobs], desc="robotwin demos", num_workers=num_workers,
        start_method=start_method, progress=progress,
    )  # fmt: skip
    return write_demos(out, cfg, [r for r in results if r["arrays"] is not None])
