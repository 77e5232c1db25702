"""Scripted-expert demonstrations for supervised warm starts, whatever the simulator: the on-disk format
(`write_demos`, `load_demos`), the recording of demo jobs (`stack_steps`, `run_demo_jobs`), and `demo_settings` /
`generate_demos` for any env type whose adapter record declares its demo source (`EnvAdapter.demos`, a
`ScriptedDemos`: each env type's experts live with its adapter, e.g. `vla_envs.metaworld.demos`).

An adapter's demos go through the very same observation pipeline as its env (for MetaWorld `MetaWorldSim`: camera,
size, 180° flip, fast rendering, action repeat), so a policy trained on them sees the inputs it will see in
`make_env`.

On-disk format (a directory):
    meta.json                 {"format": "vla-envs-demos", "version": 1, "env_type", "config": {...},
                               "num_episodes", "num_steps", "success_rate", "shards": [...],
                               "episodes": [{"task", "instruction", "trial", "length", "success",
                                             "shard", "start"}, ...]}
    shard_00000.safetensors   step arrays, concatenated episode after episode:
        images uint8 [N, H, W, 3]        observation before the action (upright)
        wrist_images uint8 [N, K, H, W, 3]  only when a wrist camera was asked for
        states float32 [N, D]            observation before the action (MetaWorld: D = 39, 7 with hand_goal)
        actions float32 [N, A]           expert action (MetaWorld: in [-1, 1], held for `action_repeat` steps)
        rewards float32 [N]              reward in the configured reward mode
        successes uint8 [N]              1 where the task was solved after this action
        episode_index int64 [N]          global episode number (index into meta["episodes"])
        step_index int64 [N]             decision index inside the episode
An episode stops at its first success or after `max_episode_steps` decisions.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from vla_envs.config import EnvConfig
from vla_envs.registry import adapters, get_adapter, resolve_ref

#: The `progress` argument of the demo generators: a tqdm bar (True), none (False), or a bar factory called with
#: tqdm's keywords (`total`, `desc`, `unit`) that returns an object with `update(n)` and `close()` (an app's bar
#: that writes plain lines to a log, for instance).
Progress = bool | Callable[..., Any]


def progress_bar(progress: Progress, **kwargs: Any) -> Any:
    """The bar `progress` asks for, built with tqdm's keywords `kwargs`."""
    if callable(progress):
        return progress(**kwargs)
    from tqdm import tqdm

    return tqdm(disable=not progress, **kwargs)


FORMAT = "vla-envs-demos"
FORMAT_VERSION = 1
# Demo trials are drawn from ids >= DEMO_TRIAL_OFFSET so they never coincide with the evaluation starts
# (trials 0 .. num_trials_per_task-1 of the env adapter).
DEMO_TRIAL_OFFSET = 100_000
STEP_KEYS = (
    "images",
    "wrist_images",
    "states",
    "actions",
    "rewards",
    "successes",
    "episode_index",
    "step_index",
)


def record_step(
    steps: dict[str, list[Any]],
    obs: dict[str, Any],
    action: np.ndarray,
    reward: float,
    success: bool,
    *,
    episode: int,
    step: int,
    wrist: bool = True,
) -> None:
    """Append one demo step to `steps` (lists keyed by STEP_KEYS): the observation the action was chosen from, the
    expert's action, the reward and success the step gave; `episode` is the job's local episode index (the writer
    makes it global). `wrist=False`: the env has no wrist camera (None recorded)."""
    steps["images"].append(obs["images"])
    steps["wrist_images"].append(obs["wrist_images"] if wrist else None)
    steps["states"].append(obs["states"])
    steps["actions"].append(action)
    steps["rewards"].append(np.float32(reward))
    steps["successes"].append(np.uint8(success))
    steps["episode_index"].append(episode)
    steps["step_index"].append(step)


def stack_steps(steps: dict[str, list[Any]]) -> dict[str, np.ndarray]:
    """Per-step lists of a demo job -> the arrays of one shard (`wrist_images` only when recorded).

    Args:
        steps: lists of equal length N under `images`, `wrist_images` (arrays or None), `states`, `actions`,
            `rewards`, `successes`, `episode_index`, `step_index`.

    Returns:
        images uint8 [N,H,W,3], states float32 [N,D], actions float32 [N,A], rewards float32 [N], successes
        uint8 [N], episode_index / step_index int64 [N], and wrist_images uint8 [N,K,H,W,3] if present.
    """
    arrays: dict[str, np.ndarray] = {
        "images": np.stack(steps["images"]).astype(np.uint8),
        "states": np.stack(steps["states"]).astype(np.float32),
        "actions": np.stack(steps["actions"]).astype(np.float32),
        "rewards": np.asarray(steps["rewards"], dtype=np.float32),
        "successes": np.asarray(steps["successes"], dtype=np.uint8),
        "episode_index": np.asarray(steps["episode_index"], dtype=np.int64),
        "step_index": np.asarray(steps["step_index"], dtype=np.int64),
    }
    if steps["wrist_images"][0] is not None:
        arrays["wrist_images"] = np.stack(steps["wrist_images"]).astype(np.uint8)
    return arrays


def demo_env_types() -> tuple[str, ...]:
    """Env types whose scripted-expert demos can be recorded as an `EnvConfig` says (`demo_settings`)."""
    return tuple(a.name for a in adapters() if a.demos is not None and a.demos.settings is not None)


def demo_settings(cfg: EnvConfig, *, episodes_per_task: int, seed: int = 0, **options: Any) -> dict[str, Any]:
    """The settings of `generate_demos` that record demos as env `cfg` observes and acts (for MetaWorld: its tasks,
    image size, cameras, action repeat, episode length, reward mode and MetaWorld options), so a policy
    warm-started on them sees what the RL envs show it: `env_type` and the keywords of its adapter's
    `ScriptedDemos.generate` (`ScriptedDemos.settings`). JSON-friendly (a demo folder's stamp).

    `options`: keywords of the env type's demo source beyond these (e.g. PutOnPlateInScene25's `perturb_xyz`);
    one it does not take is refused.

    Raises:
        ValueError: an env type without scripted experts (names the ones that have them), unknown tasks, or an
            option the env type's demo source does not take.
    """
    import inspect

    demos = get_adapter(cfg.env_type).demos
    if demos is None or demos.settings is None:
        raise ValueError(
            f"scripted-expert demos exist for env_type {list(demo_env_types())} only, got env_type={cfg.env_type!r}"
        )
    make_settings = resolve_ref(demos.settings)
    taken = [
        p.name
        for p in inspect.signature(make_settings).parameters.values()
        if p.kind is p.KEYWORD_ONLY and p.name not in ("episodes_per_task", "seed")
    ]
    unknown = sorted(set(options) - set(taken))
    if unknown:
        raise ValueError(
            f"demo option(s) {unknown} are not taken by env_type={cfg.env_type!r}'s scripted-expert demos; "
            f"it takes {taken or 'none'}"
        )
    settings = make_settings(cfg, episodes_per_task=episodes_per_task, seed=seed, **options)
    return {"env_type": cfg.env_type, **settings}


def generate_demos(
    out_dir: str | os.PathLike[str],
    settings: dict[str, Any],
    *,
    num_workers: int = 2,
    progress: Progress = True,
) -> dict[str, Any]:
    """Write the demos `settings` (from `demo_settings`: `env_type` and its generator's keywords) describe to
    `out_dir` with the adapter's `ScriptedDemos.generate`; returns the summary."""
    kwargs = dict(settings)
    demos = get_adapter(kwargs.pop("env_type", None)).demos
    if demos is None:
        raise ValueError(f"env_type={settings.get('env_type')!r} has no scripted-expert demos")
    return resolve_ref(demos.generate)(out_dir, num_workers=num_workers, progress=progress, **kwargs)  # type: ignore[no-any-return]


def run_demo_jobs(
    run_job: Callable[[Any], dict[str, Any]],
    jobs: list[Any],
    episodes: list[int],
    *,
    desc: str,
    num_workers: int,
    start_method: str,
    progress: Progress,
) -> list[dict[str, Any]]:
    """Run `run_job` (a module-level function, picklable) on every job, in this process (`num_workers=0`) or in a
    pool of worker processes, with a progress bar counting `episodes[i]` for job i; the results in job order."""
    bar = progress_bar(progress, total=sum(episodes), desc=desc, unit="ep")
    results: list[dict[str, Any] | None] = [None] * len(jobs)
    if num_workers == 0:
        for i, job in enumerate(jobs):
            results[i] = run_job(job)
            bar.update(episodes[i])
    else:
        # ProcessPoolExecutor (unlike mp.Pool) raises BrokenProcessPool instead of hanging if a worker dies
        ctx = mp.get_context(start_method)
        with ProcessPoolExecutor(min(num_workers, len(jobs)), mp_context=ctx) as pool:
            futures = {pool.submit(run_job, job): i for i, job in enumerate(jobs)}
            for future in as_completed(futures):
                i = futures[future]
                results[i] = future.result()
                bar.update(episodes[i])
    bar.close()
    return [r for r in results if r is not None]


def write_demos(out: Path, cfg: EnvConfig, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Write a demo folder (format in the module docstring) for any env type's experts; returns meta.json's dict.

    Args:
        out: The folder (it must exist).
        cfg: The env config the demos were recorded with (stored in meta.json; its `env_type` too).
        results: One shard each: `{"arrays": stack_steps(...), "episodes": [{"task", "instruction", "trial",
            "length", "success"}, ...]}` with `episode_index` counted from 0 within the shard.
    """
    from safetensors.numpy import save_file

    episodes: list[dict[str, Any]] = []
    shards = []
    num_steps = 0
    for shard_id, res in enumerate(results):
        arrays = dict(res["arrays"])
        arrays["episode_index"] = arrays["episode_index"] + len(episodes)
        name = f"shard_{shard_id:05d}.safetensors"
        save_file(arrays, str(out / name))
        shards.append(name)
        start = 0
        for ep in res["episodes"]:
            episodes.append({**ep, "shard": name, "start": start})
            start += ep["length"]
        num_steps += len(arrays["actions"])
    cfg_meta = dataclasses.asdict(cfg)
    cfg_meta.pop("video")
    meta = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "env_type": cfg.env_type,
        "config": cfg_meta,
        "num_episodes": len(episodes),
        "num_steps": num_steps,
        "success_rate": float(np.mean([e["success"] for e in episodes])) if episodes else 0.0,
        "shards": shards,
        "episodes": episodes,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


_write = write_demos  # the name the ManiSkill demo writers import


def load_demos(path: str | os.PathLike[str], *, only_success: bool = False) -> dict[str, Any]:
    """Load a demo directory into memory.

    Args:
        path: Directory written by `generate_metaworld_demos` / `vla-envs demos`.
        only_success: Keep only the steps of successful episodes.

    Returns:
        dict with the step arrays of STEP_KEYS (concatenated; `wrist_images` only if recorded),
        `task_descriptions` (a list of N strings), and `meta` (the meta.json dict).
    """
    from safetensors.numpy import load_file

    root = Path(path)
    meta_path = root / "meta.json"
    if not meta_path.exists():
        raise FileNotFoundError(f"{meta_path} not found: not a vla-envs demo directory")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{meta_path} has format {meta.get('format')!r}, expected {FORMAT!r}")
    parts = [load_file(str(root / name)) for name in meta["shards"]]
    data: dict[str, Any] = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    episodes = meta["episodes"]
    data["task_descriptions"] = [episodes[i]["instruction"] for i in data["episode_index"]]
    if only_success:
        keep = np.asarray([episodes[i]["success"] for i in data["episode_index"]], dtype=bool)
        data = {
            k: (v[keep] if isinstance(v, np.ndarray) else [x for x, m in zip(v, keep, strict=True) if m])
            for k, v in data.items()
        }
    data["meta"] = meta
    return data
