"""A deterministic env stepped in a subprocess and worker classes, shared by the placement / worker / pipeline
tests on the local and Ray backends."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from vla_infra import Worker, register


@dataclass
class PipeStep:
    """What PipeEnv.chunk_step returns (a StepResult-like record)."""

    obs: dict[str, np.ndarray]
    rewards: np.ndarray


def _env_loop(conn: Any, env_ids: list[int], seed: int, step_seconds: float) -> None:
    """Child process: per-env state driven by actions and a per-env random stream."""
    rngs = [np.random.default_rng([seed, i]) for i in env_ids]
    states = np.stack([r.normal(size=3) for r in rngs]).astype(np.float32)
    conn.send({"states": states.copy()})
    while True:
        msg = conn.recv()
        if msg is None:
            break
        actions = np.asarray(msg, dtype=np.float32)  # [B, C, A]
        time.sleep(step_seconds)  # the "simulator" is busy; the parent process is free meanwhile
        noise = np.stack([r.normal(size=3) for r in rngs]).astype(np.float32)
        states = 0.9 * states + 0.1 * actions.sum(axis=1)[:, :3] + 0.01 * noise
        rewards = -np.abs(states).sum(axis=1, keepdims=True).astype(np.float32)
        conn.send(({"states": states.copy()}, rewards))


class PipeEnv:
    """A batched env whose steps run in a subprocess (``spawn``), seeded per global env index.

    Envs ``env_ids`` behave the same whatever batch they are grouped in, which is what makes a
    two-stage run comparable row by row with a one-stage run.
    """

    def __init__(self, env_ids: list[int], *, seed: int = 0, step_seconds: float = 0.0) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_env_loop, args=(child, list(env_ids), seed, step_seconds), daemon=True
        )
        self._proc.start()
        self.num_envs = len(env_ids)
        self.child_pid = self._proc.pid
        self._first_obs = self._conn.recv()

    def reset(self) -> dict[str, np.ndarray]:
        return self._first_obs

    def chunk_step(self, actions: np.ndarray) -> PipeStep:
        self._conn.send(np.asarray(actions))
        obs, rewards = self._conn.recv()
        return PipeStep(obs=obs, rewards=rewards)

    def close(self) -> None:
        if self._proc.is_alive():
            self._conn.send(None)
            self._proc.join(timeout=10)


def rowwise_policy(states: np.ndarray) -> np.ndarray:
    """Deterministic, row-independent actions [B, 1, 3] from states [B, 3]."""
    return np.tanh(-2.0 * states)[:, None, :].astype(np.float32)


class PipeEnvWorker(Worker):
    """An env worker holding one PipeEnv per pipeline stage (its envs split by stage)."""

    def __init__(self, *, num_envs: int, stages: int, seed: int = 0, step_seconds: float = 0.0) -> None:
        size = num_envs // stages
        first = self.rank * num_envs
        self.envs = [
            PipeEnv(
                list(range(first + s * size, first + (s + 1) * size)), seed=seed, step_seconds=step_seconds
            )
            for s in range(stages)
        ]

    def reset(self, stage: int) -> dict[str, np.ndarray]:
        return self.envs[stage].reset()

    def chunk_step(self, stage: int, actions: np.ndarray) -> PipeStep:
        return self.envs[stage].chunk_step(actions)

    def close(self) -> None:
        for env in self.envs:
            env.close()


class RowwisePolicyWorker(Worker):
    """A rollout worker running rowwise_policy, optionally spending ``seconds`` per call."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds

    @register("split")
    def predict(self, states: np.ndarray) -> np.ndarray:
        if self.seconds:
            time.sleep(self.seconds)
        return rowwise_policy(states)


class Probe(Worker):
    """Reports where it runs."""

    def __init__(self, tag: str = "") -> None:
        self.tag = tag
        self.pid = os.getpid()

    @register("split")
    def double(self, x: Any) -> Any:
        return x * 2

    def allreduce_rank(self) -> float:
        """Join torch.distributed over gloo and all-reduce the ranks (needs one process per rank)."""
        import torch
        import torch.distributed as dist

        self.init_process_group("gloo")
        t = torch.tensor([float(self.rank)])
        dist.all_reduce(t)
        dist.destroy_process_group()
        return float(t.item())

    def produce(self, channel: Any, n: int) -> int:
        for i in range(n):
            channel.put({"rank": self.rank, "i": i, "data": np.full(4, i)}, key=self.rank)
        return n

    def consume(self, channel: Any, key: Any, n: int) -> list[int]:
        return [int(channel.get(key=key, timeout=60)["i"]) for _ in range(n)]
