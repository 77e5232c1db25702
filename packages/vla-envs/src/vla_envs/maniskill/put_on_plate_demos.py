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
    record_step,
    run_demo_jobs,
    stack_steps,
    write_demos,
)
from vla_envs.maniskill import put_on_plate


def put_on_plate_demo_settings(
    cfg: EnvConfig,
    *,
    episodes_per_task: int,
    seed: int = 0,
    perturb_xyz: float = 0.0,
    perturb_turn: float = 0.0,
) -> dict[str, Any]:
    """The keywords of `generate_put_on_plate_demos` that record demos as env `cfg` observes and acts.

    `perturb_xyz` / `perturb_turn`: noise on the executed actions (`generate_put_on_plate_demos`).

    Raises:
        ValueError: `cfg` is not one PutOnPlateInScene25 task (ManiSkill's other tasks have motion-planner demos:
            `vla_envs.maniskill.generate_maniskill_demos`).
    """
    from vla_envs.maniskill.options import resolve_options

    for name, value in (("perturb_xyz", perturb_xyz), ("perturb_turn", perturb_turn)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{name}={value!r} is invalid: a standard deviation >= 0")
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
        "grasp_check": opts.grasp_check,
        "render_scale": opts.render_scale,
        "perturb_xyz": float(perturb_xyz),
        "perturb_turn": float(perturb_turn),
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
            "grasp_check": settings["grasp_check"],
            "render_scale": settings["render_scale"],
        },
    )


def perturbed(action: np.ndarray, rng: np.random.Generator, settings: dict[str, Any]) -> np.ndarray:
    """The action executed for the expert's `action` [7]: Gaussian noise of std `perturb_xyz` (metres) on the
    end-effector move and `perturb_turn` (radians) on the turn; the gripper command as the expert gives it."""
    out = np.array(action, dtype=np.float32)
    if settings["perturb_xyz"] > 0:
        out[:3] += rng.normal(0.0, settings["perturb_xyz"], 3).astype(np.float32)
    if settings["perturb_turn"] > 0:
        out[5] += np.float32(rng.normal(0.0, settings["perturb_turn"]))
    return out


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
            rng = np.random.default_rng([demo_trial, 53])  # the same perturbations whatever the job split
            for t in range(cfg.max_episode_steps):
                action = expert.act(sim.base)
                next_obs, reward, succ, _ = sim.step(perturbed(action, rng, settings))
                record_step(steps, obs, action, reward, succ, episode=len(episodes), step=t, wrist=False)
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
    grasp_check: str = "source",
    render_scale: float = 1.0,
    perturb_xyz: float = 0.0,
    perturb_turn: float = 0.0,
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
            asset_dir, grasp_check, render_scale: As in the env config (`put_on_plate_demo_settings` copies them
            from it).
        perturb_xyz, perturb_turn: Standard deviations (metres, radians) of Gaussian noise added to the
            end-effector move and turn of every executed action. The recorded action stays the expert's own for
            the state observed, so the demos show states off the expert's path labelled with how the expert
            leaves them (noise injection into the demonstrator); 0 records the expert's path.
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
        "grasp_check": grasp_check,
        "render_scale": render_scale,
        "perturb_xyz": perturb_xyz,
        "perturb_turn": perturb_turn,
        "seed": seed,
    }
    cfg = _env_config(settings)
    # validates the task and options
    put_on_plate_demo_settings(
        cfg, episodes_per_task=episodes_per_task, perturb_xyz=perturb_xyz, perturb_turn=perturb_turn
    )
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
