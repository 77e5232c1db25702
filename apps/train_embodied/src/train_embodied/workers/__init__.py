"""The three worker classes of a run, one module each: simulators (`env_worker`), rollout policy
(`rollout_worker`), trained actor (`actor_worker`).

They are vla_infra `Worker`s, so the same classes run in-process (LocalBackend) or as Ray actors
(RayBackend); `@register` says how a group call splits its inputs across ranks. Data crossing a worker
boundary is numpy / torch in typed batches (`train_embodied.batches`: a `Prediction`, the update's `SampleBatch`;
a simulator step is a `vla_envs.StepResult`) and observation dicts (picklable for Ray).
"""

from train_embodied.workers.actor_worker import ActorWorker
from train_embodied.workers.env_worker import EnvWorker
from train_embodied.workers.rollout_worker import RolloutWorker, join_predictions

__all__ = ["ActorWorker", "EnvWorker", "RolloutWorker", "join_predictions"]
