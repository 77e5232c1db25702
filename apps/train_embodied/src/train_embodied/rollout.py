"""Collect one rollout: env workers step, the rollout policy acts, everything lands in a `RolloutBatch`.

With `pipeline_stage_num = S > 1` the envs are S separate env groups: while stage s simulates its chunk
(a future), the policy already runs on stage s+1 (the overlap of the reference documents).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from train_embodied.batches import Prediction
from train_embodied.progress import progress_bar
from vla_envs import StepResult, concat_obs, select_obs_rows
from vla_models import concat_forward_inputs, pad_prompts


@dataclass
class RolloutBatch:
    """T policy decisions of B envs (rows of all stages, in stage order).

    Attributes:
        forward_inputs: dict of tensors [T, B, ...]: what `policy.evaluate` needs.
        logprobs: float32 [T, B, C, A] token log-probs at sampling time.
        values: float32 [T, B] value estimates at sampling time (None without a value head).
        (The three are empty / None in a rollout whose model side the rollout ranks kept for the actor:
        `collect_rollout(record_rows_from=...)`, `train_embodied.trajectories`.)
        rewards: float32 [T, B, C].
        terminated, truncated: bool [T, B, C].
        final_values: float32 [T, B] V(final observation) of episodes truncated at decision t, else 0
            (truncation is bootstrapped with it; termination is not).
        loss_mask: bool [T, B]: decisions taken inside an episode (False after an env's episode ended
            when auto_reset is off).
        last_values: float32 [B] V(obs after the last decision) for bootstrapping (zeros without a critic).
        episodes: metrics of finished episodes: dict of float32 [E] arrays (success_once, return, episode_len).
        first_scores: float32 [B] return of each env's first episode (GRPO group score), NaN if unfinished.
        env_steps: simulator-level decisions x chunk taken (for learning curves).
        task_ids: int64 [B] each row's task: a stable id of its instruction at the rollout's start (`task_id`;
            a row keeps its task through the rollout). None where the rollout did not record it.
    """

    forward_inputs: dict[str, torch.Tensor]
    logprobs: torch.Tensor | None
    values: torch.Tensor | None
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_values: torch.Tensor
    loss_mask: torch.Tensor
    last_values: torch.Tensor
    episodes: dict[str, np.ndarray] = field(default_factory=dict)
    first_scores: torch.Tensor | None = None
    env_steps: int = 0
    task_ids: torch.Tensor | None = None


def task_id(instruction: str) -> int:
    """A stable int64 id of a task instruction: the same text gives the same id in every process and run (the
    rows of one task are grouped by it, e.g. for `algorithm.per_task_advantages`, across data-parallel ranks)."""
    return int.from_bytes(hashlib.blake2b(instruction.encode("utf-8"), digest_size=7).digest(), "little")


def task_ids_of(obs: dict[str, Any]) -> torch.Tensor:
    """int64 [B]: `task_id` of each row's instruction in an observation batch."""
    return torch.tensor([task_id(str(d)) for d in obs["task_descriptions"]], dtype=torch.int64)


def collect_rollout(
    env_stages: Sequence[Any],
    rollout: Any,
    *,
    num_decisions: int,
    reset_kwargs: Sequence[dict[str, Any]],
    bootstrap_truncation: bool,
    stop_when_all_done: bool,
    progress: bool | str = False,
    desc: str = "rollout",
    weight_version: int | None = None,
    record_rows_from: int | None = None,
) -> RolloutBatch:
    """Reset every env stage, then run `num_decisions` policy decisions on each.

    Args:
        env_stages: One env worker group per pipeline stage.
        rollout: The rollout worker group (`predict`, `values`).
        num_decisions: Decisions per env (each decision is a chunk of C actions).
        reset_kwargs: Keyword arguments of `reset` for each stage (`seed=` or `reset_state_ids=`).
        bootstrap_truncation: Compute V(final obs) of truncated episodes and of the last obs (needs a critic).
        stop_when_all_done: One episode per env (auto_reset off): decisions after an env's episode ended are
            masked out of the loss and the rollout stops once every env has finished.
        progress: `runner.progress_bar`: a bar (True), none (False), or `auto` (`train_embodied.progress`).
        desc: Progress bar label.
        weight_version: The weight version the run last synced; a rollout rank holding another refuses to
            generate (StaleWeightsError).
        record_rows_from: The global id of this rollout's first env row: the rollout ranks keep the model side of
            every decision (`RolloutWorker.hand_over` gives it to the actor ranks) and the returned batch has only
            the env side. None: everything comes back here.
    """
    num_stages = len(env_stages)
    obs = [env_stages[s].reset(**reset_kwargs[s]) for s in range(num_stages)]
    sizes = [len(o["task_descriptions"]) for o in obs]
    task_ids = torch.cat([task_ids_of(o) for o in obs])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    b_total = sum(sizes)
    steps: list[dict[str, Any]] = []
    ended_once = np.zeros(b_total, dtype=bool)
    first_scores = np.full(b_total, np.nan, dtype=np.float32)
    episodes: dict[str, list[np.ndarray]] = {"success_once": [], "return": [], "episode_len": []}
    env_steps = 0
    bar = progress_bar(progress, total=num_decisions, desc=desc, leave=False, unit="step")
    for _ in range(num_decisions):
        # Pipeline: the policy acts on stage s while the simulators of stage s-1 are still stepping.
        outs, futures = [], []
        for s in range(num_stages):
            rows = None if record_rows_from is None else record_rows_from + starts[s] + np.arange(sizes[s])
            out = rollout.predict(obs[s], mode="sample", weight_version=weight_version, rows=rows)
            outs.append(out)
            futures.append(env_stages[s].chunk_step.submit(out.actions.numpy()))
        results = [f.result() for f in futures]
        step = _merge_step(outs, results, sizes)
        alive = ~ended_once if stop_when_all_done else np.ones(b_total, dtype=bool)
        step["loss_mask"] = torch.as_tensor(alive.copy())
        final_mask = step["final_mask"]
        step["final_values"] = torch.zeros(b_total)
        if bootstrap_truncation and final_mask.any():
            trunc_rows = np.flatnonzero(step["truncated"].any(axis=1) & final_mask)
            if len(trunc_rows):
                v_final = rollout.values(select_obs_rows(step["final_obs"], trunc_rows))
                step["final_values"][torch.as_tensor(trunc_rows)] = v_final.float()
        # an episode lost with a dead env worker process restarts from its reset: not a finished episode
        final_mask = final_mask & ~step["lost"]
        if final_mask.any():
            rows = np.flatnonzero(final_mask)
            for key in episodes:
                episodes[key].append(step["episode_metrics"][key][rows])
            newly = rows[~ended_once[rows]]
            first_scores[newly] = step["episode_metrics"]["return"][newly]
            ended_once[rows] = True
        env_steps += int(alive.sum()) * step["rewards"].shape[1]
        steps.append(step)
        obs = [r.obs for r in results]
        bar.update(1)
        if stop_when_all_done and ended_once.all():
            break
    bar.close()
    last_obs = concat_obs(obs)
    last_values = rollout.values(last_obs) if bootstrap_truncation else torch.zeros(b_total)
    batch = _stack(steps, last_values, episodes, first_scores, env_steps)
    batch.task_ids = task_ids
    return batch


def _merge_step(outs: list[Prediction], results: list[StepResult], sizes: list[int]) -> dict[str, Any]:
    """One decision of every stage, concatenated along the batch (stage order)."""

    def cat(key: str) -> np.ndarray:
        return np.concatenate([np.asarray(getattr(r, key)) for r in results])

    values = None if outs[0].values is None else torch.cat([o.values for o in outs])
    kept = outs[0].logprobs is None  # the rollout ranks kept the model side
    return {
        "forward_inputs": {} if kept else concat_forward_inputs([o.forward_inputs for o in outs]),
        "logprobs": None if kept else torch.cat([o.logprobs for o in outs]),  # type: ignore[misc]
        "values": values,
        "rewards": cat("rewards").astype(np.float32),
        "terminated": cat("terminated"),
        "truncated": cat("truncated"),
        "final_mask": cat("final_mask"),
        "lost": cat("lost"),
        "final_obs": concat_obs([r.final_obs for r in results]),
        "episode_metrics": {
            k: np.concatenate([np.asarray(r.episode_metrics[k]) for r in results])
            for k in results[0].episode_metrics
        },
    }


def _stack(
    steps: list[dict[str, Any]],
    last_values: torch.Tensor,
    episodes: dict[str, list[np.ndarray]],
    first_scores: np.ndarray,
    env_steps: int,
) -> RolloutBatch:
    # a decision's prompt width is its batch's longest prompt: decisions of other tasks can differ
    decisions = pad_prompts([s["forward_inputs"] for s in steps])
    return RolloutBatch(
        forward_inputs={k: torch.stack([d[k] for d in decisions]) for k in decisions[0]},
        logprobs=None if steps[0]["logprobs"] is None else torch.stack([s["logprobs"] for s in steps]),
        values=None if steps[0]["values"] is None else torch.stack([s["values"] for s in steps]),
        rewards=torch.as_tensor(np.stack([s["rewards"] for s in steps])),
        terminated=torch.as_tensor(np.stack([s["terminated"] for s in steps])),
        truncated=torch.as_tensor(np.stack([s["truncated"] for s in steps])),
        final_values=torch.stack([s["final_values"] for s in steps]),
        loss_mask=torch.stack([s["loss_mask"] for s in steps]),
        last_values=last_values.float(),
        episodes={k: np.concatenate(v) if v else np.zeros(0, np.float32) for k, v in episodes.items()},
        first_scores=torch.as_tensor(first_scores),
        env_steps=env_steps,
    )


def pad_time(x: torch.Tensor, t: int, fill: float | bool = 0) -> torch.Tensor:
    """`x` [T', B, ...] extended to T rows along time with `fill` (a rollout shorter than others: grouped starts
    that all ended early)."""
    if x.shape[0] == t:
        return x
    pad = torch.full((t - x.shape[0], *x.shape[1:]), fill, dtype=x.dtype, device=x.device)
    return torch.cat([x, pad], dim=0)


def concat_rollouts(batches: Sequence[RolloutBatch]) -> RolloutBatch:
    """Several rollouts of one iteration (`algorithm.rollout_epoch`) as one batch: their env columns side by side
    ([T, B1 + B2 + ...]), a shorter rollout (grouped starts stop once every env's episode ended) padded in time
    with masked-out decisions after those ends. Each rollout keeps whole columns, so GAE and GRPO groups see the same data as alone.

    Prompts of different widths are left-padded to the widest.

    Raises:
        ValueError: a shorter rollout has episodes that never ended.
    """
    if len(batches) == 1:
        return batches[0]
    t = max(b.rewards.shape[0] for b in batches)
    for b in batches:
        ended = (b.terminated | b.truncated).any(-1).any(0)
        if b.rewards.shape[0] < t and not bool(ended.all()):
            # only a rollout whose every episode ended stops early: nothing after its end is bootstrapped
            raise ValueError("concat_rollouts: a shorter rollout has episodes that never ended")

    def cat(get: Any, fill: float | bool = 0) -> torch.Tensor:
        return torch.cat([pad_time(get(b), t, fill) for b in batches], dim=1)

    forward_inputs = concat_forward_inputs(
        [{k: pad_time(v, t) for k, v in b.forward_inputs.items()} for b in batches], dim=1
    )
    first = [b.first_scores for b in batches]
    tasks = [b.task_ids for b in batches]
    return RolloutBatch(
        forward_inputs=forward_inputs,
        logprobs=None if batches[0].logprobs is None else cat(lambda b: b.logprobs),
        values=None if batches[0].values is None else cat(lambda b: b.values),
        rewards=cat(lambda b: b.rewards),
        terminated=cat(lambda b: b.terminated, False),
        truncated=cat(lambda b: b.truncated, False),
        final_values=cat(lambda b: b.final_values),
        loss_mask=cat(lambda b: b.loss_mask, False),
        last_values=torch.cat([b.last_values for b in batches]),
        episodes={k: np.concatenate([b.episodes[k] for b in batches]) for k in batches[0].episodes},
        first_scores=None if any(f is None for f in first) else torch.cat(first),  # type: ignore[arg-type]
        env_steps=sum(b.env_steps for b in batches),
        task_ids=None if any(t is None for t in tasks) else torch.cat(tasks),  # type: ignore[arg-type]
    )
