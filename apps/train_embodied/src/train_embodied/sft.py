"""Supervised warm start (`vla-sft CONFIG`): scripted-expert demos -> token cross-entropy -> save_pretrained.

The demos come from vla-envs (`demo_settings` / `generate_demos`, same camera / size / action repeat as
`env.train`, trials >= 100000 so they never coincide with training or evaluation starts). The saved folder is
what `actor.model.model_path` points to. With a task set (e.g. MT10) every task gets `sft.num_demos` demos and
each batch draws its steps task-balanced (`task_balanced_indices`), with each step's own task instruction.
"""

from __future__ import annotations

import dataclasses
import json
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch

from train_embodied.config.train_config import TrainConfig
from train_embodied.policy_io import build_policy_for_run, model_config, select_proprio
from train_embodied.progress import progress_bar
from train_embodied.run_folder import write_atomic


def sft_output_dir(tc: TrainConfig) -> Path:
    """`sft.output_dir`, or `<log_path>/sft/<experiment_name>`."""
    if tc.sft.output_dir:
        return Path(tc.sft.output_dir)
    return Path(tc.runner.logger.log_path) / "sft" / tc.runner.logger.experiment_name


def make_demos(tc: TrainConfig, out: Path) -> Path:
    """Generate (or reuse, if the same settings were used before) the expert demos under `out/demos`, recorded as
    `env.train` observes and acts."""
    from vla_envs import demo_settings, generate_demos

    try:
        settings = demo_settings(
            tc.env_train, episodes_per_task=tc.sft.num_demos, seed=tc.sft.demo_seed, **tc.sft.demo_options
        )
    except ValueError as exc:
        raise ValueError(f"vla-sft (env.train, sft.demo_options): {exc}") from None
    demo_dir = out / "demos"
    stamp = demo_dir / "settings.json"
    if stamp.exists() and json.loads(stamp.read_text()) == settings:
        print(f"[sft] reusing demos in {demo_dir}")
        return demo_dir
    generate_demos(demo_dir, settings, num_workers=2, progress=partial(progress_bar, tc.runner.progress_bar))
    write_atomic(stamp, json.dumps(settings))
    return demo_dir


def chunk_targets(actions: np.ndarray, episode_index: np.ndarray, chunk: int) -> np.ndarray:
    """Expert action chunks [N, C, A]: actions i .. i+C-1 of the same episode (the last one repeated at the end)."""
    n = len(actions)
    idx = np.arange(n)[:, None] + np.arange(chunk)[None, :]
    idx = np.minimum(idx, n - 1)
    # stay inside the episode of step i
    same = episode_index[idx] == episode_index[:, None]
    last = np.maximum.accumulate(np.where(same, idx, 0), axis=1)
    return actions[np.where(same, idx, last)]


def random_shift(images: torch.Tensor, pad: int, generator: torch.Generator) -> torch.Tensor:
    """DrQ-style augmentation: replicate-pad by `pad` pixels and crop back at a random offset. uint8 [B, H, W, 3]."""
    if pad <= 0:
        return images
    b, h, w, _ = images.shape
    x = torch.nn.functional.pad(images.permute(0, 3, 1, 2).float(), (pad, pad, pad, pad), mode="replicate")
    ox = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    oy = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    out = torch.stack([x[i, :, oy[i] : oy[i] + h, ox[i] : ox[i] + w] for i in range(b)])
    return out.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)


def task_balanced_indices(step_task: np.ndarray, batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """Demo step indices int64 [batch_size]: a task drawn uniformly, then one of its steps uniformly.

    Every task weighs the same in the behaviour-cloning loss however long its demos are (a multi-task warm start
    would otherwise favour the tasks whose experts take the most steps). With one task this is a uniform draw over
    all steps.

    Args:
        step_task: int [N], the task index of each demo step.
    """
    n = len(step_task)
    tasks, counts = np.unique(step_task, return_counts=True)
    if len(tasks) == 1:
        return torch.randint(0, n, (batch_size,), generator=generator)
    order = torch.as_tensor(np.argsort(step_task, kind="stable"))  # steps grouped by task, tasks ascending
    starts = torch.as_tensor(np.concatenate([[0], np.cumsum(counts)[:-1]]))
    counts_t = torch.as_tensor(counts)
    pick = torch.randint(0, len(tasks), (batch_size,), generator=generator)
    within = (torch.rand(batch_size, generator=generator, dtype=torch.float64) * counts_t[pick]).long()
    return order[starts[pick] + torch.minimum(within, counts_t[pick] - 1)]


def demo_norm_stats(tc: TrainConfig, actions: np.ndarray, states: np.ndarray) -> dict | None:
    """OpenVLA's dataset statistics of the demos when their actions leave [-1, 1] (joint positions in radians, for
    example), else None. A policy built from scratch bins actions over [-1, 1]; with these statistics it bins them
    over each dimension's [q01, q99] of the demos (and normalises its proprio input the same way), as OpenVLA-OFT's
    fine-tuning does with its dataset's statistics. Stored with the policy (`dataset_statistics.json`)."""
    from vla_models import dataset_statistics, family_names, get_family

    if np.abs(actions).max() <= 1.0:
        return None
    model = tc.actor.model
    if not get_family(model.model_type).reads_dataset_statistics:
        takers = [name for name in family_names() if get_family(name).reads_dataset_statistics]
        raise ValueError(
            f"vla-sft: the demos' actions leave [-1, 1] (max |a| = {np.abs(actions).max():.3g}); statistics that "
            f"map them onto the policy's bins are read by actor.model.model_type {takers}, not "
            f"{model.model_type!r}"
        )
    key = tc.env_train.task or tc.runner.logger.experiment_name
    return dataset_statistics(actions, proprio=states if model.use_proprio else None, key=key)


def run_sft(tc: TrainConfig) -> Path:
    """Generate demos, train the policy by behaviour cloning and save it; returns the policy folder."""
    from vla_envs import load_demos

    t_start = time.time()
    out = sft_output_dir(tc)
    out.mkdir(parents=True, exist_ok=True)
    demo_dir = make_demos(tc, out)
    demo_seconds = round(time.time() - t_start, 1)
    data = load_demos(demo_dir, only_success=True)  # a failed expert episode is no example to imitate
    meta = data["meta"]
    print(
        f"[sft] {meta['num_episodes']} demos, {meta['num_steps']} steps, expert success {meta['success_rate']:.2f} "
        f"({demo_seconds}s); training on the {len(data['actions'])} steps of the successful ones"
    )
    if not len(data["actions"]):
        raise RuntimeError(f"vla-sft: no demo in {demo_dir} succeeded; nothing to imitate")
    task_names = sorted({ep["task"] for ep in meta["episodes"]})
    task_of_episode = np.asarray([task_names.index(ep["task"]) for ep in meta["episodes"]])
    step_task = task_of_episode[data["episode_index"]]
    if len(task_names) > 1:
        for i, name in enumerate(task_names):
            eps = [ep for ep in meta["episodes"] if ep["task"] == name]
            print(
                f"[sft]   {name}: {len(eps)} demos, {int((step_task == i).sum())} steps, expert success "
                f"{np.mean([ep['success'] for ep in eps]):.2f}"
            )

    if tc.training_threads > 0:
        torch.set_num_threads(tc.training_threads)  # nothing else runs now: the demos are written
    torch.manual_seed(tc.runner.seed)
    section = dataclasses.replace(tc.actor.model, model_path=None)  # from scratch
    stats = demo_norm_stats(tc, data["actions"], data["states"])
    if stats is None:
        policy = build_policy_for_run(section, None)
    else:
        from vla_models import build_policy

        policy = build_policy(dataclasses.replace(model_config(section), norm_stats=stats))
    policy.eval()  # no dropout: the warm start is then exactly what RL starts from
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=tc.sft.lr)
    g = torch.Generator().manual_seed(tc.runner.seed)
    images = torch.as_tensor(data["images"])
    states = torch.as_tensor(data["states"])
    targets = torch.as_tensor(
        chunk_targets(data["actions"], data["episode_index"], tc.actor.model.num_action_chunks),
        dtype=torch.float32,
    )
    texts = data["task_descriptions"]
    n = len(images)
    losses = []
    bar = progress_bar(tc.runner.progress_bar, iterable=range(tc.sft.steps), desc="sft", unit="step")
    for _ in bar:
        idx = task_balanced_indices(step_task, min(tc.sft.batch_size, n), g)
        obs = {
            "images": random_shift(images[idx], tc.sft.augment_shift, g),
            "wrist_images": None,
            "states": states[idx],
            "task_descriptions": [texts[i] for i in idx.tolist()],
        }
        loss, _ = policy.sft_loss(select_proprio(obs, tc.actor.model), targets[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
    policy_dir = out / "policy"
    policy.save_pretrained(str(policy_dir))
    info = {
        "demos": str(demo_dir),
        "num_demos": meta["num_episodes"],
        "num_steps": meta["num_steps"],
        "num_tasks": len(task_names),
        "sft_steps": tc.sft.steps,
        "final_loss": float(np.mean(losses[-20:])) if losses else None,
        "demo_seconds": demo_seconds,
        "wall_seconds": round(time.time() - t_start, 1),
    }
    write_atomic(out / "sft_summary.json", json.dumps(info, indent=2))
    print(f"[sft] loss {info['final_loss']}; saved {policy_dir} in {info['wall_seconds']}s")
    return policy_dir
