"""`VectorEnv` autoreset and crash restart, and the rollout collector, on a deterministic simulator.

The fake simulator (`fake_counter_sim`) ends each episode at a known step, so every flag, final observation
and mask can be asserted exactly, in seconds and without MuJoCo. The real-simulator tests of vla-envs and the
end-to-end tests cover the same code with MetaWorld, ManiSkill3 and LIBERO.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from vla_envs import EnvConfig
from vla_envs.vector import VectorEnv

# --import-mode=importlib: put the simulator module beside this file on the path
sys.path.insert(0, str(Path(__file__).parent))
import fake_counter_sim as fake

fake.register()  # EnvConfig accepts registered env types only
# reset ids 0, 1, 2, 3 succeed after 1, 2, 3 steps, and never (the time limit, 5 steps, truncates them)
IDS = [0, 1, 2, 3]


def _env(**kw) -> VectorEnv:
    base = dict(
        env_type=fake.ENV_TYPE, task="count", num_envs=4, envs_per_worker=0, image_size=8, max_episode_steps=5
    )
    return fake.make_counter_env(EnvConfig(**{**base, **kw}))


def _zeros(b: int = 4, c: int = 2) -> np.ndarray:
    return np.zeros((b, c, fake.ACTION_DIM), np.float32)


def test_same_step_autoreset_reports_each_end_once_and_skips_the_rest_of_the_chunk() -> None:
    env = _env(auto_reset=True)
    try:
        env.reset(reset_state_ids=IDS)
        r = env.chunk_step(_zeros())  # steps 1-2
        assert r.terminated.tolist() == [[True, False], [False, True], [False, False], [False, False]]
        assert not r.truncated.any() and r.rewards.tolist() == [[1, 0], [0, 1], [0, 0], [0, 0]]
        assert r.final_mask.tolist() == [True, True, False, False]
        assert r.final_obs["states"][:2].tolist() == [[0, 1], [1, 2]]  # the last obs of the ended episodes
        assert r.obs["states"][:2, 1].tolist() == [0, 0]  # already the next episode's first obs
        assert r.obs["states"][2:].tolist() == [[2, 2], [3, 2]]
        assert r.episode_metrics["episode_len"][:2].tolist() == [1, 2]
        assert r.episode_metrics["success_once"][:2].tolist() == [1, 1]
        r = env.chunk_step(_zeros())  # steps 3-4 of rows 2 and 3
        assert r.terminated[2].tolist() == [True, False] and r.final_obs["states"][2].tolist() == [2, 3]
        r = env.chunk_step(_zeros())  # row 3 reaches the time limit at step 5: truncated, not terminated
        assert r.truncated[3].tolist() == [True, False] and not r.terminated[3].any()
        assert r.final_obs["states"][3].tolist() == [3, 5] and r.episode_metrics["success_once"][3] == 0
    finally:
        env.close()


def test_without_autoreset_an_ended_row_stays_ended_until_reset() -> None:
    env = _env(auto_reset=False)
    try:
        env.reset(reset_state_ids=IDS)
        first = env.chunk_step(_zeros())
        assert first.final_mask[0]
        for _ in range(2):
            r = env.chunk_step(_zeros())
            assert not r.final_mask[0] and not r.terminated[0].any() and r.rewards[0].sum() == 0
            assert r.obs["states"][0].tolist() == [0, 1]  # held at its final observation
        env.reset(reset_state_ids=IDS)
        assert env.chunk_step(_zeros()).final_mask[0]  # a reset starts it again
    finally:
        env.close()


def test_a_crashed_worker_is_restarted_and_its_rows_end_their_episode() -> None:
    env = _env(auto_reset=True, envs_per_worker=2, start_method="fork", worker_timeout_s=30.0)
    try:
        env.reset(reset_state_ids=[2, 3, 2, 3])
        env.chunk_step(_zeros(c=1))
        actions = _zeros(c=1)
        actions[0, 0, 0] = fake.CRASH  # the worker holding rows 0 and 1 dies
        r = env.chunk_step(actions)
        assert env.worker_restarts == 1
        assert r.truncated[:2, 0].tolist() == [True, True] and r.final_mask[:2].all()
        assert r.lost.tolist() == [True, True, False, False]  # ended by the crash, not finished
        assert r.final_obs["states"][:2].tolist() == [[2, 1], [3, 1]]  # the last obs seen before the crash
        assert r.obs["states"][:2, 1].tolist() == [0, 0]  # restarted rows begin new episodes
        assert r.obs["states"][2:].tolist() == [[2, 2], [3, 2]]  # the other worker stepped on
        assert not r.final_mask[2:].any()
        r = env.chunk_step(_zeros(c=1))
        # the replacement worker steps its rows like any other (no further restart or boundary)
        assert r.terminated[2, 0] and env.worker_restarts == 1 and not r.truncated[:2].any()
        assert not r.lost.any()
    finally:
        env.close()


@contextmanager
def _stages_and_rollout(stage_cfgs: list[EnvConfig]):
    """Pipeline stages of 2 env ranks each (one per config) and one rollout rank with the tiny OpenVLA-OFT."""
    from train_embodied.config.sections import ModelSection, RolloutSection
    from train_embodied.workers import EnvWorker, RolloutWorker
    from vla_infra import WorkerGroup, make_backend, resolve_placement

    fake.register()
    torch.manual_seed(0)
    backend = make_backend("local")
    placement = resolve_placement({"env": "0:0-1", "rollout": 0}, num_nodes=1, num_gpus_per_node=0)
    stages = [
        WorkerGroup(EnvWorker, placement["env"], backend=backend, name=f"env_{s}", kwargs={"env_cfg": cfg})
        for s, cfg in enumerate(stage_cfgs)
    ]
    model = ModelSection(
        image_size=32,
        action_dim=fake.ACTION_DIM,
        num_action_chunks=2,
        use_proprio=False,
        extra={"patch_size": 16, "hidden_size": 64},
    )
    rollout = WorkerGroup(
        RolloutWorker,
        placement["rollout"],
        backend=backend,
        name="rollout",
        kwargs={"model": model, "env_spec": stages[0].spec(), "sampling": RolloutSection()},
    )
    # a random value head (its last layer starts at zero), so that bootstrapped values are visible
    from train_embodied.policy_io import build_policy_for_run

    weights = build_policy_for_run(model, stages[0].spec()).state_dict()
    g = torch.Generator().manual_seed(1)
    for k, v in weights.items():
        if "value_head" in k:
            weights[k] = torch.randn(v.shape, generator=g) * 0.5
    rollout.load_weights(weights, 1)
    try:
        yield stages, rollout
    finally:
        for g in stages:
            g.close()
        for g in [*stages, rollout]:
            g.shutdown()
        backend.shutdown()


def _stage_cfg(**kw) -> EnvConfig:
    base = dict(
        env_type=fake.ENV_TYPE,
        task="count",
        num_envs=2,
        envs_per_worker=0,
        image_size=32,
        max_episode_steps=5,
        auto_reset=False,
    )
    return EnvConfig(**{**base, **kw})


@pytest.fixture
def groups():
    """Two pipeline stages of 2 env ranks (1 row each, simulators in-process) and one rollout rank."""
    with _stages_and_rollout([_stage_cfg(), _stage_cfg()]) as built:
        yield built


def test_rollout_collector_joins_stages_and_ranks_and_masks_finished_episodes(groups) -> None:
    from train_embodied.advantages import compute_advantages
    from train_embodied.config.sections import AlgorithmSection
    from train_embodied.rollout import collect_rollout, task_id

    stages, rollout = groups
    batch = collect_rollout(
        stages,
        rollout,
        num_decisions=5,
        reset_kwargs=[{"reset_state_ids": np.array([0, 1])}, {"reset_state_ids": np.array([2, 3])}],
        bootstrap_truncation=True,
        stop_when_all_done=True,
    )
    # rows in stage order: ids 0, 1 (stage 0, ranks 0 and 1), ids 2, 3 (stage 1); chunks of 2 actions
    # row 0 ends at decision 0 (action 0), row 1 at decision 0 (action 1), row 2 at decision 1 (action 0),
    # row 3 is truncated at step 5 = decision 2 (action 0); then every env is done and the rollout stops
    assert batch.rewards.shape == (3, 4, 2) and batch.logprobs.shape[:3] == (3, 4, 2)
    assert batch.terminated[0, :2].tolist() == [[True, False], [False, True]]
    assert batch.terminated[1, 2].tolist() == [True, False] and batch.truncated[2, 3].tolist() == [
        True,
        False,
    ]
    assert batch.loss_mask.T.tolist() == [[True, False, False]] * 2 + [
        [True, True, False],
        [True, True, True],
    ]
    assert batch.first_scores.tolist() == [1.0, 1.0, 1.0, 0.0]
    assert batch.task_ids.tolist() == [task_id("count")] * 4  # each row's task, by its instruction
    assert batch.env_steps == (4 + 2 + 1) * 2
    # V(final obs) bootstraps the truncated episode only
    final_obs = {
        "images": np.full((1, 32, 32, 3), 5, np.uint8),
        "wrist_images": None,
        "states": np.array([[3, 5]], np.float32),
        "task_descriptions": ["count"],
    }
    expected = float(rollout.values(final_obs)[0])
    assert expected != 0 and float(batch.final_values[2, 3]) == pytest.approx(expected, abs=1e-6)
    assert int((batch.final_values != 0).sum()) == 1
    adv = compute_advantages(
        batch, AlgorithmSection(adv_type="grpo", loss_type="actor", group_size=2, normalize_advantages=False)
    )
    # groups (0, 1) both succeed: no signal; group (2, 3): the success gets the positive advantage
    assert adv.advantages[0, :2].abs().max() < 1e-4 and adv.advantages[0, 2] > 0 > adv.advantages[0, 3]


def test_env_ranks_and_stages_go_round_the_tasks_of_the_whole_batch() -> None:
    """3 tasks over 2 pipeline stages x 2 env ranks of 1 row: rows 0-3 of the whole batch run tasks 0, 1, 2, 0
    (each rank alone would run task 0 only, and tasks 1 and 2 would never train)."""
    from train_embodied.workers import EnvWorker
    from vla_infra import WorkerGroup, make_backend, resolve_placement

    backend = make_backend("local")
    placement = resolve_placement({"env": "0:0-1"}, num_nodes=1, num_gpus_per_node=0)
    base = dict(env_type=f"{fake.ENV_TYPE}_3", task_set=["a", "b", "c"], num_envs=2, envs_per_worker=0)
    stages = [
        WorkerGroup(
            EnvWorker,
            placement["env"],
            backend=backend,
            name=f"env_{s}",
            kwargs={"env_cfg": EnvConfig(**base, first_row=2 * s, image_size=8, num_trials_per_task=10)},
        )
        for s in range(2)
    ]
    try:
        tasks = []
        for stage in stages:
            for seed in (0, 1):  # whatever the draw, a row keeps its task
                obs = stage.reset(seed=seed)
                tasks.append((obs["states"][:, 0] // 10).astype(int).tolist())
        assert tasks == [[0, 1], [0, 1], [2, 0], [2, 0]]
    finally:
        for g in stages:
            g.close()
            g.shutdown()
        backend.shutdown()
    with pytest.raises(ValueError, match="first_row"):
        EnvConfig(**base, first_row=-1)


def test_a_simulator_dying_in_one_pipeline_stage_mid_rollout(tmp_path: Path) -> None:
    """Two pipeline stages step concurrently (the policy acts on one stage while the other's chunk is in flight).
    A simulator process of stage 1 dies in its first step: its row ends there as truncated and is counted as
    lost, its replacement starts the row's episode again, and the rollout completes with every other row as
    it would have run."""
    fake.register()
    (tmp_path / "die.0").touch()  # the first step of a stage-1 simulator that finds this token dies
    cfgs = [
        _stage_cfg(envs_per_worker=1, start_method="fork", worker_timeout_s=30.0, extra={"die_once_dir": d})
        for d in (str(tmp_path / "none"), str(tmp_path))
    ]
    from train_embodied.rollout import collect_rollout

    with _stages_and_rollout(cfgs) as (stages, rollout):
        batch = collect_rollout(
            stages,
            rollout,
            num_decisions=2,
            reset_kwargs=[{"reset_state_ids": np.array([3, 3])}, {"reset_state_ids": np.array([3, 3])}],
            bootstrap_truncation=False,
            stop_when_all_done=False,
        )
        stats = [s.fault_stats() for s in stages]
    assert not (tmp_path / "die.0").exists()
    assert [sum(r["worker_restarts"] for r in st) for st in stats] == [0, 1]
    assert [sum(r["lost_episodes"] for r in st) for st in stats] == [0, 1]
    # reset id 3 never succeeds, and 2 decisions of 2 steps stay inside the 5-step limit: only the row that lost
    # its simulator ends
    ended = batch.truncated.any(-1)
    assert ended[0, :2].tolist() == [False, False] and int(ended[0, 2:].sum()) == 1
    assert not ended[1:].any() and not batch.terminated.any()
    # the lost episode is not a finished one: no episode metrics (`env/success_once`) come from it
    assert len(batch.episodes["success_once"]) == 0
    assert batch.rewards.shape == (2, 4, 2) and batch.env_steps == 2 * 4 * 2


def test_a_simulator_dying_mid_evaluation_episode_is_scored_on_its_restart(tmp_path: Path) -> None:
    """Held-out evaluation with a simulator process that dies in its first step: the lost episode is not scored
    (as a dead Ray env actor's rows are not, `test_e2e_ray_worker_restart.py`); its row starts again from the same
    held-out start and that episode is scored, so every start counts once, as it would without the crash."""
    from train_embodied.evaluation import evaluate

    fake.register()
    (tmp_path / "die.0").touch()
    cfg = _stage_cfg(
        envs_per_worker=1, start_method="fork", worker_timeout_s=30.0, extra={"die_once_dir": str(tmp_path)}
    )
    with _stages_and_rollout([cfg]) as (stages, rollout):
        # reset id 2 succeeds at its 3rd step: 2 decisions of 2 steps, or 3 when the first is lost
        means, per_episode = evaluate(
            stages[0],
            rollout,
            num_envs=2,
            num_episodes=2,
            reset_ids=np.array([2, 2]),
            max_decisions=4,
            mode="sample",
        )
        stats = stages[0].fault_stats()
    assert not (tmp_path / "die.0").exists() and sum(r["lost_episodes"] for r in stats) == 1
    assert per_episode["success_once"].tolist() == [1.0, 1.0]
    assert means["num_trajectories"] == 2.0 and means["episode_len"] == 3.0
