"""Scripted-expert demonstrations of LIBERO's drawer-closing tasks, in the shared demo format of `vla_envs.demos`.

Each worker process builds the batch row exactly as the adapter does (`LiberoSim`: the agent-view camera at the
env's size made upright, the wrist camera if asked, the 8-D proprio state, the task's instruction, the settle
steps, action repeat and reward) and drives it with `DrawerCloseExpert`, which reads privileged simulator state.
Demos always start from LIBERO's own start sampler (`extra['init_states']='sampled'`): demo k of task T runs trial
`DEMO_TRIAL_OFFSET + seed * episodes_per_task + k`, a start that training (trials below `num_trials_per_task`) and
held-out evaluation (trials from `trial_offset`, below the offset) never use, whatever the env's own start mode.

With `action_noise` > 0 the executed position deltas are the expert's plus Gaussian noise of that standard deviation
(action units; the gripper and rotation stay as the expert says), while the recorded action is the expert's own
for the state it saw: the demos then hold states off the expert's path labelled with the way back (DART-style
expert relabelling), so behaviour cloning learns to correct a step, not to replay a path.
An episode stops at its first success or after `max_episode_steps` decisions; failed episodes are kept and marked
`success: false`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import numpy as np

from vla_envs.config import EnvConfig
from vla_envs.demos import DEMO_TRIAL_OFFSET, STEP_KEYS, record_step, run_demo_jobs, stack_steps, write_demos

#: LIBERO tasks of the guides' suites with a scripted expert (`DrawerCloseExpert`): LIBERO-90's top-drawer tasks.
#: Not KITCHEN_SCENE4's bottom drawer: pushing it, the hand meets the middle drawer's handle with the drawer still
#: 10 cm open (0 of 50 fixed and 0 of 30 sampled starts closed; pushing 2 cm below the handle's centre, at best 2 cm
#: short of closed).
EXPERT_TASKS = (
    "KITCHEN_SCENE10_close_the_top_drawer_of_the_cabinet",
    "KITCHEN_SCENE5_close_the_top_drawer_of_the_cabinet",
)
#: Decisions per demo episode when `vla-envs demos libero` is given no `--max-episode-steps` (action repeat 4: the
#: expert needs 10-14).
CLI_MAX_EPISODE_STEPS = 25


def _check_tasks(tasks: list[str]) -> None:
    missing = [t for t in tasks if t not in EXPERT_TASKS]
    if missing:
        raise ValueError(
            f"LIBERO has scripted-expert demos for the tasks {list(EXPERT_TASKS)} only, got {missing}"
        )


def libero_demo_settings(
    cfg: EnvConfig, *, episodes_per_task: int, seed: int = 0, action_noise: float = 0.0
) -> dict[str, Any]:
    """The keywords of `generate_libero_demos` that record demos as env `cfg` observes and acts (its tasks, image
    size, cameras, action repeat, episode length, settle steps, image flip and drawn meshes), with `action_noise`
    (`sft.demo_options` in a config: expert relabelling of perturbed states, module docstring).

    Raises:
        ValueError: a setting the adapter refuses, a negative `action_noise`, or a task without a scripted expert.
    """
    if not action_noise >= 0:
        raise ValueError(f"action_noise={action_noise} is invalid: a standard deviation >= 0")
    from vla_envs.libero.options import resolve_options
    from vla_envs.libero.suites import resolve_tasks

    opts = resolve_options(cfg)
    tasks = [t.name for t in resolve_tasks(cfg.task, cfg.task_set)]
    _check_tasks(tasks)
    return {
        "tasks": tasks,
        "episodes_per_task": int(episodes_per_task),
        "image_size": [int(x) for x in cfg.image_hw],
        "wrist_camera": cfg.wrist_camera,
        "action_repeat": int(cfg.action_repeat),
        "max_episode_steps": int(cfg.max_episode_steps),
        "num_settle_steps": int(opts.num_settle_steps),
        "settle_gripper": float(opts.settle_gripper),
        "image_flip": opts.image_flip,
        "render_mesh_grid": float(opts.render_mesh_grid),
        "action_noise": float(action_noise),
        "seed": int(seed),
    }


def demo_settings_from_cli(args: argparse.Namespace) -> dict[str, Any]:
    """`vla-envs demos libero ...` -> `generate_libero_demos` keywords (`--tasks`: names of `EXPERT_TASKS`)."""
    return {
        "tasks": args.tasks.split(","),
        "episodes_per_task": args.episodes,
        "image_size": [args.image_size, args.image_size],
        "wrist_camera": args.wrist_camera,
        "action_repeat": args.action_repeat,
        "max_episode_steps": CLI_MAX_EPISODE_STEPS
        if args.max_episode_steps is None
        else args.max_episode_steps,
        "render_mesh_grid": args.render_mesh_grid,
        "seed": args.seed,
    }


def _env_config(settings: dict[str, Any], task: str) -> EnvConfig:
    return EnvConfig(
        env_type="libero",
        task=task,
        image_size=tuple(settings["image_size"]),
        wrist_camera=settings["wrist_camera"],
        action_repeat=settings["action_repeat"],
        max_episode_steps=settings["max_episode_steps"],
        num_trials_per_task=DEMO_TRIAL_OFFSET * 10,  # demo trials lie above the offset
        seed=settings["seed"],
        extra={
            "init_states": "sampled",
            "num_settle_steps": settings["num_settle_steps"],
            "settle_gripper": settings["settle_gripper"],
            "image_flip": settings["image_flip"],
            "render_mesh_grid": settings["render_mesh_grid"],
        },
    )


def _run_job(args: tuple[dict[str, Any], str, list[int]]) -> dict[str, Any]:
    """Worker: run the expert of `task` from the starts of `trials`; returns stacked step arrays and episode info."""
    settings, task_name, trials = args
    from vla_envs.gl import configure_mujoco_gl

    configure_mujoco_gl()
    os.environ.setdefault("LP_NUM_THREADS", "1")
    from vla_envs.libero.drawer_expert import DrawerCloseExpert
    from vla_envs.libero.options import resolve_options
    from vla_envs.libero.sim import LiberoSim
    from vla_envs.libero.suites import resolve_tasks

    cfg = _env_config(settings, task_name)
    task = resolve_tasks(task_name, None)[0]
    sim = LiberoSim(cfg, [task], resolve_options(cfg))
    noise = float(settings["action_noise"])
    steps: dict[str, list[Any]] = {k: [] for k in STEP_KEYS}
    episodes = []
    try:
        expert = None
        for trial in trials:
            demo_trial = DEMO_TRIAL_OFFSET + trial
            obs = sim.reset(demo_trial)
            assert sim.current is not None
            if expert is None:
                expert = DrawerCloseExpert(sim.current.env.env)
            expert.reset()
            rng = np.random.default_rng([settings["seed"], demo_trial])
            success = False
            length = 0
            for t in range(cfg.max_episode_steps):
                action = expert.act()
                executed = action.copy()
                if noise > 0:
                    executed[:3] = np.clip(executed[:3] + rng.normal(0.0, noise, 3), -1.0, 1.0)
                next_obs, reward, succ, _ = sim.step(executed)
                record_step(steps, obs, action, reward, succ, episode=len(episodes), step=t)
                obs = next_obs
                length += 1
                if succ:
                    success = True
                    break
            episodes.append(
                {
                    "task": task.name,
                    "instruction": task.language,
                    "trial": demo_trial,
                    "length": length,
                    "success": success,
                }
            )
    finally:
        sim.close()
    return {"arrays": stack_steps(steps), "episodes": episodes}


def generate_libero_demos(
    out_dir: str | os.PathLike[str],
    *,
    tasks: list[str],
    episodes_per_task: int,
    image_size: int | list[int] | tuple[int, int] = 64,
    wrist_camera: str | None = None,
    action_repeat: int = 4,
    max_episode_steps: int = CLI_MAX_EPISODE_STEPS,
    num_settle_steps: int = 10,
    settle_gripper: float = -1.0,
    image_flip: str = "rotate180",
    render_mesh_grid: float = 0.0,
    action_noise: float = 0.0,
    seed: int = 0,
    num_workers: int = 2,
    episodes_per_job: int | None = None,
    start_method: str = "forkserver",
    progress: bool = True,
) -> dict[str, Any]:
    """Run the scripted expert (module docstring) and write a demo directory; returns its metadata.

    Args:
        out_dir: Output directory (created; existing shards there are overwritten).
        tasks: Task names of `EXPERT_TASKS`.
        episodes_per_task: Episodes per task (failures included).
        image_size, wrist_camera, action_repeat, max_episode_steps, num_settle_steps, settle_gripper, image_flip,
            render_mesh_grid: As in the env config (`libero_demo_settings` copies them from it).
        action_noise: Standard deviation of the noise added to the executed position deltas (0: none).
        seed: Base seed; demo k of a task uses trial DEMO_TRIAL_OFFSET + seed * episodes_per_task + k.
        num_workers: Worker processes (0 = in this process). Each builds one LIBERO env (10-45 s on 2 cores).
        episodes_per_job: Episodes per work item (one shard and one env build each); None: a task's episodes split
            evenly over the workers.
        start_method: multiprocessing start method.
        progress: Show a tqdm progress bar.
    """
    from vla_envs.libero.env import check_libero_installed, libero_spec

    if episodes_per_task < 1:
        raise ValueError(f"episodes_per_task={episodes_per_task} is invalid: must be >= 1")
    if action_noise < 0:
        raise ValueError(f"action_noise={action_noise} is invalid: a standard deviation >= 0")
    _check_tasks(list(tasks))
    settings = {
        "image_size": [image_size, image_size] if isinstance(image_size, int) else list(image_size),
        "wrist_camera": wrist_camera,
        "action_repeat": action_repeat,
        "max_episode_steps": max_episode_steps,
        "num_settle_steps": num_settle_steps,
        "settle_gripper": settle_gripper,
        "image_flip": image_flip,
        "render_mesh_grid": render_mesh_grid,
        "action_noise": action_noise,
        "seed": seed,
    }
    for task in tasks:
        libero_spec(_env_config(settings, task))  # validates every setting with clear errors
    check_libero_installed()
    base = seed * episodes_per_task
    trials = list(range(base, base + episodes_per_task))
    if episodes_per_job is None:
        episodes_per_job = -(-episodes_per_task // max(1, num_workers))
    jobs = [
        (settings, task, trials[k : k + episodes_per_job])
        for task in tasks
        for k in range(0, len(trials), episodes_per_job)
    ]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = run_demo_jobs(
        _run_job, jobs, [len(job[2]) for job in jobs], desc="libero demos", num_workers=num_workers,
        start_method=start_method, progress=progress,
    )  # fmt: skip
    cfg = _env_config(settings, tasks[0]).replace(task=None, task_set=list(tasks))
    return write_demos(out, cfg, results)
