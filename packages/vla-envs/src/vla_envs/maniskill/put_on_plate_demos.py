"""Scripted-expert demonstrations of the PutOnPlateInScene25 tasks, in the shared demo format of `vla_envs.demos`.

Each worker process builds the env exactly as the adapter does (`PutOnPlateSim`: the task's camera after its
overlay compositing, resized to `image_size`; WidowX joint positions as states; the task's instruction; the
adapter's reward and gripper mapping) and drives it with `PutOnPlateExpert`, which reads the task's privileged
state. Demo k starts from the task episode that trial `DEMO_TRIAL_OFFSET + seed * episodes + k` draws
(`put_on_plate.episode_ids`), so demos never reuse the starts of training or evaluation (trials below the offset).
An episode stops at its first success or after `max_episode_steps` decisions; failed episodes are kept and marked
`success: false` (`load_demos(path, only_success=True)` drops them).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from vla_envs.config import EnvConfig
from vla_envs.demos import (
    DEMO_TRIAL_OFFSET,
    STEP_KEYS,
    Progress,
    run_demo_jobs,
    stack_steps,
    write_demos,
)
from vla_envs.maniskill import put_on_plate


def put_on_plate_demo_settings(cfg: EnvConfig, *, episodes_per_task: int, seed: int = 0) -> dict[str, Any]:
    """The keywords of `generate_put_on_plate_demos` that record demos as env `cfg` observes and acts.

    Raises:
        ValueError: `cfg` is not one PutOnPlateInScene25 task (ManiSkill's other tasks have motion-planner demos:
            `vla_envs.maniskill.generate_maniskill_demos`).
    """
    from vla_envs.maniskill.options import resolve_options

    opts = resolve_options(cfg)
    if not opts.put_on_plate or len(opts.task_list) != 1:
        raise ValueError(
            f"scripted-expert demos exist for one PutOnPlateInScene25 task (e.g. PutOnPlateInScene25Main-v3), got "
            f"task={cfg.task!r} task_set={cfg.task_set!r}; other ManiSkill tasks have motion-planner demos "
            "(`vla-envs demos maniskill`)"
        )
    return {
        "task": opts.task,
        "episodes_per_task": int(episodes_per_task),
        "image_size": [int(x) for x in cfg.image_hw],
        "max_episode_steps": int(cfg.max_episode_steps),
        "action_repeat": int(cfg.action_repeat),
        "reward_mode": opts.reward_mode,
        "obj_set": opts.obj_set,
        "use_rel_reward": bool(opts.use_rel_reward),
        "gripper_action": opts.gripper_action,
        "asset_dir": opts.asset_dir,
        "seed": int(seed),
    }


def _env_config(settings: dict[str, Any]) -> EnvConfig:
    return EnvConfig(
        env_type="maniskill",
        task=settings["task"],
        image_size=tuple(settings["image_size"]),
        max_episode_steps=settings["max_episode_steps"],
        action_repeat=settings["action_repeat"],
        reward_mode=settings["reward_mode"],
        num_trials_per_task=1,  # demo starts are drawn per trial id, see `_run_job`
        seed=settings["seed"],
        extra={
            "obj_set": settings["obj_set"],
            "use_rel_reward": settings["use_rel_reward"],
            "gripper_action": settings["gripper_action"],
            "asset_dir": settings["asset_dir"],
        },
    )


def _run_job(args: tuple[dict[str, Any], tuple[str, str], list[int]]) -> dict[str, Any]:
    """Worker: run the expert from the starts of `trials`; returns stacked step arrays and episode info."""
    settings, roots, trials = args
    os.environ.setdefault("LP_NUM_THREADS", "1")
    put_on_plate.prepare_process(Path(roots[0]), Path(roots[1]))
    from vla_envs.maniskill.cpu_sim import PutOnPlateSim
    from vla_envs.maniskill.options import resolve_options
    from vla_envs.maniskill.put_on_plate_expert import PutOnPlateExpert

    cfg = _env_config(settings)
    opts = resolve_options(cfg)
    sim = PutOnPlateSim(cfg, opts)
    expert = PutOnPlateExpert(gripper_action=opts.gripper_action)
    steps: dict[str, list[Any]] = {k: [] for k in STEP_KEYS}
    episodes = []
    try:
        for trial in trials:
            demo_trial = DEMO_TRIAL_OFFSET + trial
            # one_trial=1 < the task's episode count: the episode id is the fixed draw of this trial id
            episode = int(put_on_plate.episode_ids(np.array([demo_trial]), 1, sim.total_num_trials)[0])
            obs = sim.reset_episode(episode, demo_trial)
            expert.reset()
            success = False
            length = 0
            for t in range(cfg.max_episode_steps):
                action = expert.act(sim.base)
                next_obs, reward, succ, _ = sim.step(action)
                steps["images"].append(obs["images"])
                steps["wrist_images"].append(None)
                steps["states"].append(obs["states"])
                steps["actions"].append(action)
                steps["rewards"].append(np.float32(reward))
                steps["successes"].append(np.uint8(succ))
                steps["episode_index"].append(len(episodes))  # local; made global by the writer
                steps["step_index"].append(t)
                obs = next_obs
                length += 1
                if succ:
                    success = True
                    break
            episodes.append(
                {
                    "task": opts.task,
                    "instruction": sim.instruction,
                    "trial": demo_trial,
                    "episode_id": episode,
                    "length": length,
                    "success": success,
                }
            )
    finally:
        sim.close()
    return {"arrays": stack_steps(steps), "episodes": episodes}


def generate_put_on_plate_demos(
    out_dir: str | os.PathLike[str],
    *,
    task: str,
    episodes_per_task: int,
    image_size: int | list[int] | tuple[int, int] = 64,
    max_episode_steps: int = 80,
    action_repeat: int = 1,
    reward_mode: str = "sparse",
    obj_set: str = "train",
    use_rel_reward: bool = True,
    gripper_action: str = "threshold",
    asset_dir: str | None = None,
    seed: int = 0,
    num_workers: int = 2,
    episodes_per_job: int = 5,
    start_method: str = "forkserver",
    progress: Progress = True,
) -> dict[str, Any]:
    """Run the scripted expert (module docstring) and write a demo directory; returns its metadata.

    Args:
        out_dir: Output directory (created; existing shards there are overwritten).
        task: A PutOnPlateInScene25 task id.
        episodes_per_task: Episodes to record (failures included).
        image_size, max_episode_steps, action_repeat, reward_mode, obj_set, use_rel_reward, gripper_action,
            asset_dir: As in the env config (`put_on_plate_demo_settings` copies them from it).
        seed: Base seed; demo k uses trial DEMO_TRIAL_OFFSET + seed * episodes_per_task + k.
        num_workers: Worker processes (0 = in this process, which must not have imported ManiSkill for other
            asset folders). Each builds one env (20-60 s on a CPU renderer).
        episodes_per_job: Episodes per work item (one shard each).
        start_method: multiprocessing start method.
        progress: A tqdm progress bar (True), none (False), or a bar factory (`vla_envs.demos.Progress`).
    """

    from vla_envs.maniskill.runtime import check_task

    if episodes_per_task < 1:
        raise ValueError(f"episodes_per_task={episodes_per_task} is invalid: must be >= 1")
    settings = {
        "task": task,
        "image_size": [image_size, image_size] if isinstance(image_size, int) else list(image_size),
        "max_episode_steps": max_episode_steps,
        "action_repeat": action_repeat,
        "reward_mode": reward_mode,
        "obj_set": obj_set,
        "use_rel_reward": use_rel_reward,
        "gripper_action": gripper_action,
        "asset_dir": asset_dir,
        "seed": seed,
    }
    cfg = _env_config(settings)
    put_on_plate_demo_settings(cfg, episodes_per_task=episodes_per_task)  # validates the task and options
    check_task(task, asset_dir=asset_dir)
    roots = tuple(str(r) for r in put_on_plate.asset_roots(asset_dir))
    base = seed * episodes_per_task
    trials = list(range(base, base + episodes_per_task))
    jobs = [
        (settings, roots, trials[k : k + episodes_per_job]) for k in range(0, len(trials), episodes_per_job)
    ]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = run_demo_jobs(
        _run_job, jobs, [len(job[2]) for job in jobs], desc="put-on-plate demos", num_workers=num_workers,
        start_method=start_method, progress=progress,
    )  # fmt: skip
    return write_demos(out, cfg, results)
