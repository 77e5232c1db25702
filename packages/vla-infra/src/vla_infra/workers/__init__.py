"""Worker groups with dispatch modes, and the local and Ray backends that run them."""

from vla_infra.workers.backend import Backend, WorkerHandle
from vla_infra.workers.dispatch import (
    COLLECT_MODES,
    DISPATCH_MODES,
    concat_values,
    register,
    split_value,
    unit_bounds,
)
from vla_infra.workers.factory import BACKENDS, make_backend
from vla_infra.workers.failures import NodeLost, WorkerFailure, WorkerLost, WorkerTimeout, phase
from vla_infra.workers.group import GroupFuture, GroupMethod, WorkerGroup
from vla_infra.workers.local_backend import LocalBackend
from vla_infra.workers.worker import Worker, WorkerInfo


def __getattr__(name: str):  # RayBackend imports lazily so that `ray` stays optional at import time
    if name == "RayBackend":
        from vla_infra.workers.ray_backend import RayBackend

        return RayBackend
    raise AttributeError(name)


__all__ = [
    "BACKENDS",
    "COLLECT_MODES",
    "DISPATCH_MODES",
    "Backend",
    "GroupFuture",
    "GroupMethod",
    "LocalBackend",
    "NodeLost",
    "RayBackend",
    "Worker",
    "WorkerFailure",
    "WorkerGroup",
    "WorkerHandle",
    "WorkerInfo",
    "WorkerLost",
    "WorkerTimeout",
    "concat_values",
    "make_backend",
    "phase",
    "register",
    "split_value",
    "unit_bounds",
]
