"""`algorithm.per_task_advantages`: each task's advantages are centred (`center`) or whitened (`whiten`) by that
task's own statistics (the rows grouped by their instruction), in one process and over two real gloo ranks that each
hold part of every task's rows; and the rollout records each row's task."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from train_embodied.advantages import compute_advantages
from train_embodied.config.sections import AlgorithmSection
from train_embodied.rollout import RolloutBatch, task_id, task_ids_of

T, C = 5, 2
# rows of three tasks; split [0, 4) / [4, 6) over two ranks, rank 1 holds no "push the puck" row
TASKS = [
    "open the drawer",
    "close the drawer",
    "open the drawer",
    "push the puck",
    "close the drawer",
    "open the drawer",
]
B = len(TASKS)

# the rollout and the split live in one module both this test and the rank processes import
BATCH_SRC = '''
import torch

from train_embodied.config.sections import AlgorithmSection
from train_embodied.rollout import RolloutBatch, task_ids_of

ALGOS = {
    "center": AlgorithmSection(per_task_advantages="center"),
    "whiten": AlgorithmSection(per_task_advantages="whiten"),
    # task k's rows score about 5 + 10 k: "push the puck" (on rank 0 only) is left out on both ranks
    "filter": AlgorithmSection(
        per_task_advantages="center", filter_rewards=True, rewards_lower_bound=0.0, rewards_upper_bound=20.0
    ),
}


def rollout(tasks, lo, hi):
    """A PPO rollout of len(tasks) rows, rows [lo, hi) of it: rewards differ by task (task k's rows earn about k
    more), one episode ends early (its later decisions are out of the loss)."""
    g = torch.Generator().manual_seed(0)
    t, b, c = 5, len(tasks), 2
    offset = torch.tensor([float(sorted(set(tasks)).index(x)) for x in tasks])
    rewards = torch.rand(t, b, c, generator=g) + offset[None, :, None]
    terminated = torch.zeros(t, b, c, dtype=torch.bool)
    terminated[2, 1, 1] = True
    loss_mask = torch.ones(t, b, dtype=torch.bool)
    loss_mask[3:, 1] = False
    batch = RolloutBatch(
        forward_inputs={},
        logprobs=None,
        values=torch.randn(t, b, generator=g),
        rewards=rewards,
        terminated=terminated,
        truncated=torch.zeros(t, b, c, dtype=torch.bool),
        final_values=torch.zeros(t, b),
        loss_mask=loss_mask,
        last_values=torch.randn(b, generator=g),
        task_ids=task_ids_of({"task_descriptions": tasks}),
    )
    return columns(batch, slice(lo, hi))


def columns(batch, cols):
    """The rows `cols` (a slice or a list of indices) of a rollout."""
    return RolloutBatch(
        forward_inputs={},
        logprobs=None,
        values=batch.values[:, cols],
        rewards=batch.rewards[:, cols],
        terminated=batch.terminated[:, cols],
        truncated=batch.truncated[:, cols],
        final_values=batch.final_values[:, cols],
        loss_mask=batch.loss_mask[:, cols],
        last_values=batch.last_values[cols],
        task_ids=batch.task_ids[cols],
    )
'''

RANKS_SCRIPT = """
import sys

import torch

from rollout_fixture import ALGOS, rollout
from train_embodied.advantages import compute_advantages
from train_embodied.data_parallel import rank_task_groups
from vla_infra import all_reduce_sum
from vla_infra.fsdp import spawn_local_group

TASKS = {tasks!r}
ROWS = [(0, 4), (4, 6)]


def run(rank, world_size, out):
    part = rollout(TASKS, *ROWS[rank])  # the task ids are computed in this process (another hash seed)
    for mode, algo in ALGOS.items():
        groups = rank_task_groups(part.task_ids)
        adv = compute_advantages(part, algo, all_reduce=all_reduce_sum, task_groups=groups)
        torch.save(adv.advantages, f"{{out}}/{{mode}}{{rank}}.pt")


if __name__ == "__main__":
    spawn_local_group(run, world_size=2, args=(sys.argv[1],))
    print("ok")
"""


@pytest.fixture
def fixture_dir(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "rollout_fixture.py").write_text(BATCH_SRC)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _task_stats(adv: torch.Tensor, batch: RolloutBatch) -> dict[str, tuple[float, float]]:
    out = {}
    for name in sorted(set(TASKS)):
        cols = [b for b, x in enumerate(TASKS) if x == name]
        sel = adv[:, cols][batch.loss_mask[:, cols]]
        out[name] = (float(sel.mean()), float(sel.std()))
    return out


def test_each_task_is_whitened_by_its_own_statistics(fixture_dir: Path) -> None:
    from rollout_fixture import rollout

    batch = rollout(TASKS, 0, B)
    per_task = compute_advantages(batch, AlgorithmSection(per_task_advantages="whiten")).advantages
    for name, (mean, std) in _task_stats(per_task, batch).items():
        assert mean == pytest.approx(0.0, abs=1e-5) and std == pytest.approx(1.0, rel=1e-4), name
    # the rollout-wide whitening leaves the tasks' means apart (task k earns about k more): the key changes it
    pooled = compute_advantages(batch, AlgorithmSection()).advantages
    means = [m for m, _ in _task_stats(pooled, batch).values()]
    assert max(means) - min(means) > 0.5
    # advantages after an episode's end stay out of the statistics: whitening only what enters the loss
    raw = compute_advantages(batch, AlgorithmSection(normalize_advantages=False)).advantages
    cols = [b for b, x in enumerate(TASKS) if x == "close the drawer"]
    kept = raw[:, cols][batch.loss_mask[:, cols]]
    expected = (raw[:, cols] - kept.mean()) / kept.std()
    assert torch.allclose(per_task[:, cols], expected, atol=1e-5)


@pytest.mark.slow
def test_two_ranks_whiten_each_task_over_both_ranks_rows(fixture_dir: Path) -> None:
    from rollout_fixture import ALGOS, rollout

    script = fixture_dir / "task_whiten_ranks.py"
    script.write_text(RANKS_SCRIPT.format(tasks=TASKS))
    done = subprocess.run(
        [sys.executable, str(script), str(fixture_dir)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
    for mode, algo in ALGOS.items():
        parts = [torch.load(fixture_dir / f"{mode}{r}.pt", weights_only=True) for r in (0, 1)]
        whole = compute_advantages(rollout(TASKS, 0, B), algo)
        assert torch.allclose(torch.cat(parts, dim=1), whole.advantages, atol=1e-5), mode
    # the filter left "push the puck" (row 3, rank 0's) out, and not the others
    filtered = compute_advantages(rollout(TASKS, 0, B), ALGOS["filter"]).advantages
    assert bool((filtered[:, 3] == 0).all()) and bool((filtered[:, [0, 1, 2, 4, 5]] != 0).any(dim=0).all())


def test_rollout_without_task_ids_is_refused_by_name() -> None:
    batch = RolloutBatch(
        forward_inputs={},
        logprobs=None,
        values=torch.zeros(T, B),
        rewards=torch.ones(T, B, C),
        terminated=torch.zeros(T, B, C, dtype=torch.bool),
        truncated=torch.zeros(T, B, C, dtype=torch.bool),
        final_values=torch.zeros(T, B),
        loss_mask=torch.ones(T, B, dtype=torch.bool),
        last_values=torch.zeros(B),
    )
    with pytest.raises(ValueError, match="per_task_advantages='center' needs each env row's task"):
        compute_advantages(batch, AlgorithmSection(per_task_advantages="center"))


def test_task_ids_tell_instructions_apart() -> None:
    ids = task_ids_of({"task_descriptions": TASKS})
    assert ids.dtype == torch.int64 and ids.tolist() == [task_id(x) for x in TASKS]
    assert len(set(ids.tolist())) == len(set(TASKS))
    # (the same ids in another process, another str hash seed: the two-rank test computes them in each rank)


def test_centred_tasks_keep_the_rollouts_scale(fixture_dir: Path) -> None:
    from rollout_fixture import rollout

    batch = rollout(TASKS, 0, B)
    centred = compute_advantages(batch, AlgorithmSection(per_task_advantages="center")).advantages
    for name, (mean, _) in _task_stats(centred, batch).items():
        assert mean == pytest.approx(0.0, abs=1e-5), name
    # one std over the whole rollout (each task's own std differs): a task without signal stays small
    kept = centred[batch.loss_mask]
    assert float(kept.std()) == pytest.approx(1.0, rel=1e-4)
    stds = [s for _, s in _task_stats(centred, batch).values()]
    assert max(stds) - min(stds) > 0.1
    # without `normalize_advantages` only the means are subtracted
    raw = compute_advantages(batch, AlgorithmSection(normalize_advantages=False)).advantages
    only = compute_advantages(
        batch, AlgorithmSection(normalize_advantages=False, per_task_advantages="center")
    ).advantages
    cols = [b for b, x in enumerate(TASKS) if x == "open the drawer"]
    sel = raw[:, cols][batch.loss_mask[:, cols]]
    assert torch.allclose(only[:, cols], raw[:, cols] - sel.mean(), atol=1e-5)


def _sparse_rollout() -> RolloutBatch:
    """A sparse-reward PPO rollout, one episode per row (auto_reset off): "push the puck" fails in both its rows,
    "open the drawer" succeeds in one of its two, "close the drawer" succeeds in both at the second decision."""
    tasks = [
        "push the puck",
        "open the drawer",
        "close the drawer",
        "push the puck",
        "open the drawer",
        "close the drawer",
    ]
    g = torch.Generator().manual_seed(1)
    rewards = torch.zeros(T, len(tasks), C)
    terminated = torch.zeros(T, len(tasks), C, dtype=torch.bool)
    truncated = torch.zeros(T, len(tasks), C, dtype=torch.bool)
    for b, t in ((1, 3), (2, 1), (5, 1)):  # successes end their episode
        rewards[t, b, C - 1] = 1.0
        terminated[t, b, C - 1] = True
    truncated[T - 1, [0, 3, 4], C - 1] = True
    loss_mask = ~torch.cumsum((terminated | truncated).any(-1).int(), 0).roll(1, 0).bool()
    loss_mask[0] = True
    return RolloutBatch(
        forward_inputs={},
        logprobs=None,
        values=torch.rand(T, len(tasks), generator=g),
        rewards=rewards,
        terminated=terminated,
        truncated=truncated,
        final_values=torch.zeros(T, len(tasks)),
        loss_mask=loss_mask,
        last_values=torch.zeros(len(tasks)),
        task_ids=task_ids_of({"task_descriptions": tasks}),
    )


@pytest.mark.parametrize("upper, kept", [(1.0, [1, 2, 4, 5]), (0.9, [1, 4])])
def test_filter_rewards_leaves_tasks_without_outcome_contrast_out_of_the_policy_loss(
    upper: float, kept: list[int], fixture_dir: Path
) -> None:
    """PPO's `filter_rewards`: a task whose mean first-episode score (summed rewards) is outside the bounds gets
    zero advantages; the others get exactly what a rollout of only their rows would give (their tasks centred, one
    std over them); the critic's targets and the loss mask stay those of the whole rollout."""
    from rollout_fixture import columns

    batch = _sparse_rollout()
    algo = AlgorithmSection(
        per_task_advantages="center", filter_rewards=True, rewards_lower_bound=0.1, rewards_upper_bound=upper
    )
    out = compute_advantages(batch, algo)
    plain = compute_advantages(batch, AlgorithmSection(per_task_advantages="center"))
    dropped = [b for b in range(B) if b not in kept]
    assert bool((out.advantages[:, dropped] == 0).all())
    alone = compute_advantages(columns(batch, kept), AlgorithmSection(per_task_advantages="center"))
    assert torch.allclose(out.advantages[:, kept], alone.advantages, atol=1e-6)
    assert not torch.allclose(out.advantages[:, kept], plain.advantages[:, kept], atol=1e-3)
    assert torch.equal(out.returns, plain.returns) and torch.equal(out.loss_mask, plain.loss_mask)
    assert out.stats["rollout/kept_group_fraction"] == pytest.approx(len(kept) / B)
    # the rows' mean score: three successes, three failures (summed rewards, as the reference scores a group)
    assert out.stats["rollout/scores_mean"] == pytest.approx(3 / B)
    # discount_scores: two successes at decision 1 (0.99 each), one at decision 3 (0.99**3)
    discounted = compute_advantages(batch, dataclasses.replace(algo, discount_scores=True))
    assert discounted.stats["rollout/scores_mean"] == pytest.approx((2 * 0.99 + 0.99**3) / B)


def test_filter_rewards_without_task_groups_is_refused_not_ignored() -> None:
    """Built without the config's check, a PPO filter with no task groups fails by name instead of doing nothing
    (vla_algos' own refusal: the reward filter of a non-grouped estimator needs the rows grouped)."""
    with pytest.raises(ValueError, match=r"a reward filter with adv_type='gae' needs the rows grouped"):
        compute_advantages(_sparse_rollout(), AlgorithmSection(filter_rewards=True, rewards_lower_bound=0.1))
