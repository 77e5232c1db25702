"""ManiSkill motion-planning demonstrations, converted to 7-D `pd_ee_delta_pose` actions with RGB observations.

For every episode:
    1. ManiSkill's Panda motion planner (`mani_skill.examples.motionplanning.panda.solutions.solve<Task>`) solves
       the task in a `pd_joint_pos` env (no rendering); its joint-position actions are recorded.
    2. The recorded actions are replayed, from the same seed, by ManiSkill's controller conversion
       (`mani_skill.trajectory.utils.actions.conversion.from_pd_joint_pos_to_ee`): at every step it aims the
       end effector of a `pd_ee_delta_pose` env at the pose the joint target would reach, taking up to 4 extra
       steps when a delta is clipped. That env is built exactly like the adapter's (same options, cameras and
       observation conversion), so the recorded observations are what `make_env` returns.
    3. If the replay has not succeeded yet, the arm holds still for up to `settle_steps` steps (several success
       conditions require a static robot/object). The episode is cut at its first success (or after
       `max_episode_steps` decisions) and written in the shared demo format of `vla_envs.demos` (meta.json +
       safetensors shards; see that module's docstring).

Planner or conversion failures are kept as unsuccessful episodes (`success: false` in meta.json) unless
`keep_failed=False`; `load_demos(path, only_success=True)` filters them.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import multiprocessing as mp
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vla_envs.config import EnvConfig
from vla_envs.maniskill.tasks import TASKS

if TYPE_CHECKING:
    from vla_envs.demos import Progress

DEMO_TRIAL_OFFSET = 100_000  # demo starts never coincide with the adapter's evaluation trials (ids < offset)
SOLUTIONS_MODULE = "mani_skill.examples.motionplanning.panda.solutions"


def _recorder_classes() -> tuple[type, type]:
    """gymnasium wrappers that record what passes through `step` (defined lazily: gymnasium is optional here)."""
    import gymnasium as gym

    class ActionRecorder(gym.Wrapper):
        """Records the planner's actions."""

        def reset(self, **kwargs: Any) -> Any:
            self.actions: list[np.ndarray] = []
            return self.env.reset(**kwargs)

        def step(self, action: Any) -> Any:
            self.actions.append(np.asarray(action, dtype=np.float32).reshape(-1))
            return self.env.step(action)

    class StepRecorder(gym.Wrapper):
        """Records (observation before the action, action, reward, success) of the converted replay."""

        def start(self, raw_obs: Any, to_row: Any) -> None:
            self.to_row = to_row
            self.obs = to_row(raw_obs)
            self.steps: list[tuple[dict[str, Any], np.ndarray, float, bool]] = []

        def step(self, action: Any) -> Any:
            act = action.detach().cpu().numpy() if hasattr(action, "detach") else np.asarray(action)
            out = self.env.step(action)
            raw_obs, reward, _, _, info = out
            success = bool(info["success"].reshape(-1)[0]) if "success" in info else False
            self.steps.append(
                (self.obs, act.astype(np.float32).reshape(-1), float(reward.reshape(-1)[0]), success)
            )
            self.obs = self.to_row(raw_obs)
            return out

    return ActionRecorder, StepRecorder


def _run_job(args: tuple[dict[str, Any], list[int], bool, int]) -> dict[str, Any]:
    """Plan and convert the episodes `trials` of one task; returns step arrays and episode info."""
    cfg_dict, trials, keep_failed, settle_steps = args
    import warnings

    warnings.filterwarnings("ignore")
    os.environ.setdefault("LP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    from mani_skill.trajectory.utils.actions.conversion import from_pd_joint_pos_to_ee

    from vla_envs.demos import stack_steps
    from vla_envs.maniskill.cpu_sim import instruction_for, reset_seed
    from vla_envs.maniskill.observations import batch_obs, to_numpy_row
    from vla_envs.maniskill.options import resolve_options
    from vla_envs.maniskill.runtime import make_raw_env

    cfg = EnvConfig.from_dict(cfg_dict)
    opts = resolve_options(cfg)
    instruction = instruction_for(opts)
    solve = getattr(importlib.import_module(SOLUTIONS_MODULE), TASKS[opts.task].solver or "")
    action_recorder, step_recorder = _recorder_classes()
    planner_env = action_recorder(
        make_raw_env(
            opts.task, obs_mode="none", control_mode="pd_joint_pos", sim_backend="cpu", render_mode=None
        )
    )
    demo_env = step_recorder(make_raw_env(opts.task, **opts.make_kwargs(num_envs=1)))
    demo_base = demo_env.unwrapped

    def to_row(raw_obs: Any) -> dict[str, Any]:
        return to_numpy_row(batch_obs(demo_base, raw_obs, opts, instruction))

    keys = (
        "images",
        "wrist_images",
        "states",
        "actions",
        "rewards",
        "successes",
        "episode_index",
        "step_index",
    )
    steps: dict[str, list[Any]] = {k: [] for k in keys}
    episodes: list[dict[str, Any]] = []
    try:
        for trial in trials:
            seed = reset_seed(cfg.seed, DEMO_TRIAL_OFFSET + trial)
            planned = planner_success = False
            try:
                result = solve(planner_env, seed=seed, debug=False, vis=False)
                planned = not (isinstance(result, int) and result == -1)
                if planned and isinstance(result, tuple) and "success" in result[-1]:
                    planner_success = bool(result[-1]["success"].reshape(-1)[0])
            except Exception:  # the planner raises on some unreachable grasps
                planned = False
            actions = list(planner_env.actions)
            raw_obs, _ = demo_env.reset(seed=seed)
            demo_env.start(raw_obs, to_row)
            if planned and actions:
                planner_env.reset(seed=seed)  # replay the plan from the same start
                from_pd_joint_pos_to_ee("pd_ee_delta_pose", actions, ori_env=planner_env, env=demo_env)
                # Success often also needs the robot/objects to be static: hold still for a few steps.
                for _ in range(settle_steps):
                    if any(step[3] for step in demo_env.steps):
                        break
                    hold = np.zeros(opts.action_dim, np.float32)
                    hold[-1] = (
                        demo_env.steps[-1][1][-1] if demo_env.steps else 1.0
                    )  # keep the gripper command
                    demo_env.step(hold)
            record = demo_env.steps
            first = next((i for i, s in enumerate(record) if s[3]), None)
            success = first is not None and first < cfg.max_episode_steps
            record = record[: first + 1] if success and first is not None else record[: cfg.max_episode_steps]
            if not record or (not success and not keep_failed):
                continue  # nothing to record (no plan found) or a failure that is not kept
            for t, (obs, action, reward, succ) in enumerate(record):
                steps["images"].append(obs["images"])
                steps["wrist_images"].append(obs["wrist_images"])
                steps["states"].append(obs["states"])
                steps["actions"].append(np.clip(action, -1.0, 1.0))
                steps["rewards"].append(np.float32(reward))
                steps["successes"].append(np.uint8(succ))
                steps["episode_index"].append(len(episodes))
                steps["step_index"].append(t)
            episodes.append(
                {
                    "task": opts.task,
                    "instruction": instruction,
                    "trial": DEMO_TRIAL_OFFSET + trial,
                    "length": len(record),
                    "success": bool(success),
                    "planner_found_plan": bool(planned),
                    "planner_success": planner_success,
                    "planner_steps": len(actions),
                }
            )
    finally:
        planner_env.close()
        demo_env.close()
    if not episodes:
        return {"arrays": None, "episodes": []}
    return {"arrays": stack_steps(steps), "episodes": episodes}


def generate_maniskill_demos(
    out_dir: str | os.PathLike[str],
    *,
    tasks: list[str],
    episodes_per_task: int,
    image_size: int | tuple[int, int] = 128,
    wrist_camera: str | None = None,
    max_episode_steps: int = 400,
    reward_mode: str = "sparse",
    render: bool = True,
    num_workers: int = 1,
    episodes_per_job: int = 10,
    start_method: str = "forkserver",
    seed: int = 0,
    keep_failed: bool = True,
    settle_steps: int = 20,
    progress: Progress = True,
) -> dict[str, Any]:
    """Generate motion-planner demos (module docstring) and write them in the `vla_envs.demos` format.

    Args:
        out_dir: Output directory (created; existing shards there are overwritten).
        tasks: ManiSkill task ids with a solver in `TASKS` (e.g. ["PickCube-v1"]).
        episodes_per_task: Planned episodes per task (failed plans count, see `keep_failed`).
        image_size: Camera size (int or (H, W)); use the env's value.
        wrist_camera: None or "hand_camera" (Panda hand camera as `wrist_images`).
        max_episode_steps: Decision cap per converted episode (planned episodes take ~60-270 steps).
        reward_mode: "sparse", "dense" or "normalized_dense" (stored per step).
        render: Record RGB images (False: images [N, 0, 0, 3], much faster on a CPU).
        num_workers: Worker processes (0 = in this process). Each builds one RGB env (~10-30 s on llvmpipe).
        episodes_per_job: Episodes per work item (one shard each).
        start_method: multiprocessing start method.
        seed: Base seed; episode k of a task starts from `reset_seed(seed, 100000 + seed * episodes + k)`.
        keep_failed: Keep episodes whose plan or conversion failed (marked `success: false`).
        settle_steps: After the converted plan, hold still (zero arm delta, same gripper command) for up to this
            many steps until success (several tasks also require the robot and objects to be static).
        progress: A tqdm progress bar (True), none (False), or a bar factory (`vla_envs.demos.Progress`).

    Returns:
        The metadata written to meta.json: `success_rate` = successes / episodes written, and
        `attempt_success_rate` = successes / `attempted_episodes` (planner failures included).
    """
    from vla_envs.demos import progress_bar, write_demos
    from vla_envs.maniskill.runtime import check_task

    if episodes_per_task < 1:
        raise ValueError(f"episodes_per_task={episodes_per_task} is invalid: must be >= 1")
    for task in tasks:
        check_task(task)
        if TASKS[task].solver is None:
            with_solver = sorted(t for t, spec in TASKS.items() if spec.solver)
            raise ValueError(f"task {task!r} has no motion-planning solution; tasks with one: {with_solver}")
    jobs = []
    base = seed * episodes_per_task
    cfg = EnvConfig(env_type="maniskill", task=tasks[0])
    for task in tasks:
        cfg = EnvConfig(
            env_type="maniskill",
            task=task,
            image_size=image_size,
            wrist_camera=wrist_camera,
            max_episode_steps=max_episode_steps,
            render=render,
            seed=seed,
            extra={"reward_mode": reward_mode},
        )
        cfg_dict = dataclasses.asdict(cfg)
        trials = list(range(base, base + episodes_per_task))
        for k in range(0, len(trials), episodes_per_job):
            jobs.append((cfg_dict, trials[k : k + episodes_per_job], keep_failed, settle_steps))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bar = progress_bar(progress, total=len(tasks) * episodes_per_task, desc="maniskill demos", unit="ep")
    results: list[dict[str, Any] | None] = [None] * len(jobs)
    if num_workers == 0:
        for i, job in enumerate(jobs):
            results[i] = _run_job(job)
            bar.update(len(job[1]))
    else:
        ctx = mp.get_context(start_method)
        with ctx.Pool(min(num_workers, len(jobs))) as pool:
            for i, res in pool.imap_unordered(_indexed_job, list(enumerate(jobs))):
                results[i] = res
                bar.update(len(jobs[i][1]))
    bar.close()
    kept = [r for r in results if r is not None and r["arrays"] is not None]
    if not kept:
        raise RuntimeError(f"no demonstration succeeded for {tasks} (keep_failed={keep_failed})")
    if len(tasks) > 1:
        cfg = cfg.replace(task=None, task_set=list(tasks))
    meta = write_demos(out, cfg, kept)
    # Planner attempts that left no episode (no plan found, or failures not kept) still count as failures.
    attempted = len(tasks) * episodes_per_task
    successes = sum(e["success"] for e in meta["episodes"])
    meta["env_type"] = "maniskill"
    meta["attempted_episodes"] = attempted
    meta["attempt_success_rate"] = successes / attempted
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


def _indexed_job(item: tuple[int, tuple[dict[str, Any], list[int], bool, int]]) -> tuple[int, dict[str, Any]]:
    return item[0], _run_job(item[1])
