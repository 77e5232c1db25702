"""Pipelined rollout (rollout.pipeline_stage_num): same results as unpipelined, and real overlap."""

from __future__ import annotations

import sys
import time
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from pipeline_env_workers import PipeEnv, PipeEnvWorker, RowwisePolicyWorker, rowwise_policy

from vla_infra import ThreadedStageStepper, WorkerGroup, run_pipelined_rollout, split_envs_into_stages

NUM_ENVS, STEPS = 8, 6


def done_future(value):
    f: Future = Future()
    f.set_result(value)
    return f


def rollout_with(envs, policy, *, overlap: bool):
    stepper = ThreadedStageStepper(envs)
    try:
        submit = stepper.submit if overlap else (lambda s, a: done_future(envs[s].chunk_step(a)))
        steps = run_pipelined_rollout(
            initial_obs=[e.reset() for e in envs],
            num_steps=STEPS,
            policy=policy,
            submit_step=submit,
        )
    finally:
        stepper.close()
    states = np.stack(
        [np.concatenate([steps[s][t].obs["states"] for s in range(len(envs))]) for t in range(STEPS)]
    )
    rewards = np.stack(
        [np.concatenate([steps[s][t].result.rewards for s in range(len(envs))]) for t in range(STEPS)]
    )
    return states, rewards


def make_stage_envs(stages, step_seconds=0.0):
    return [
        PipeEnv(list(r), seed=7, step_seconds=step_seconds) for r in split_envs_into_stages(NUM_ENVS, stages)
    ]


def close_all(envs):
    for e in envs:
        e.close()


def test_two_stages_equal_one_stage_row_by_row():
    one, two = make_stage_envs(1), make_stage_envs(2)
    try:
        ref = rollout_with(one, lambda s, obs: rowwise_policy(obs["states"]), overlap=False)
        got = rollout_with(two, lambda s, obs: rowwise_policy(obs["states"]), overlap=True)
    finally:
        close_all(one + two)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])
    assert ref[0].shape == (STEPS, NUM_ENVS, 3) and np.abs(np.diff(ref[0], axis=0)).min() > 0  # states move


def test_overlapped_equals_sequential_with_sampling_policy():
    def sampling_policy():
        gen = torch.Generator().manual_seed(3)

        def policy(stage, obs):
            mean = torch.as_tensor(rowwise_policy(obs["states"]))
            return (mean + 0.3 * torch.randn(mean.shape, generator=gen)).numpy()

        return policy

    runs = []
    for overlap in (False, True):
        envs = make_stage_envs(2)
        try:
            runs.append(rollout_with(envs, sampling_policy(), overlap=overlap))
        finally:
            close_all(envs)
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


def test_stage_two_overlaps_env_and_policy():
    """Env step and policy each take 40 ms per stage: overlapped ~ half the sequential time."""
    envs = make_stage_envs(2, step_seconds=0.04)

    def policy(stage, obs):
        time.sleep(0.04)  # stands for inference (releases the GIL like torch kernels do)
        return rowwise_policy(obs["states"])

    try:
        timings = {}
        for overlap in (False, True):
            start = time.perf_counter()
            rollout_with(envs, policy, overlap=overlap)
            timings[overlap] = time.perf_counter() - start
    finally:
        close_all(envs)
    ideal = STEPS * 2 * 0.04 + 0.04
    assert timings[False] >= STEPS * 2 * 0.08
    assert timings[True] < 0.75 * timings[False], timings
    assert timings[True] >= ideal * 0.95


def test_worker_groups_pipeline_matches_in_process():
    """Env and rollout groups on the local backend, env steps submitted asynchronously."""
    envs = WorkerGroup(PipeEnvWorker, 1, kwargs={"num_envs": NUM_ENVS, "stages": 2, "seed": 7})
    policy = WorkerGroup(RowwisePolicyWorker, 2)
    try:
        steps = run_pipelined_rollout(
            initial_obs=[envs.reset(s)[0] for s in range(2)],
            num_steps=STEPS,
            policy=lambda s, obs: policy.predict(obs["states"]),
            submit_step=lambda s, actions: envs.chunk_step.submit(s, actions),
            next_obs=lambda results: results[0].obs,  # one env rank: its output
        )
    finally:
        envs.shutdown()
        policy.shutdown()
    got = np.stack([np.concatenate([steps[s][t].obs["states"] for s in range(2)]) for t in range(STEPS)])
    ref_envs = make_stage_envs(1)
    try:
        ref = rollout_with(ref_envs, lambda s, obs: rowwise_policy(obs["states"]), overlap=False)
    finally:
        close_all(ref_envs)
    np.testing.assert_array_equal(got, ref[0])


def test_split_envs_into_stages_checks():
    assert split_envs_into_stages(8, 2) == [range(0, 4), range(4, 8)]
    with pytest.raises(ValueError, match="pipeline_stage_num"):
        split_envs_into_stages(6, 4)
    with pytest.raises(ValueError, match="pipeline_stage_num"):
        split_envs_into_stages(6, 0)
