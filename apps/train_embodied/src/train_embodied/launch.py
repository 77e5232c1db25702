"""What a cluster launcher needs from a run's config: its node and GPU counts, and a KubeRay `RayJob` for it.

    python -m train_embodied.launch info CONFIG [KEY=VALUE ...]      # NUM_NODES=2 NUM_GPUS_PER_NODE=8 (shell)
    python -m train_embodied.launch kuberay CONFIG [KEY=VALUE ...] [--image IMAGE] [--name NAME] [--runs-claim PVC]

`info` is read by `scripts/slurm/ray_train.sbatch`, which starts the Ray head and workers with `ray start` on the
Slurm allocation's nodes and runs `vla-train ... cluster.ray_address=auto` on the head. `kuberay` prints a RayJob
(`ray.io/v1`): one head pod and `cluster.num_nodes - 1` worker pods with `cluster.num_gpus_per_node` GPUs each, the
run folders on a shared volume (every actor rank writes its checkpoint shard there), and `vla-train` as the
entrypoint. A config problem is one line on stderr, exit 2, as for `vla-train`.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from typing import Any

#: Where the RayJob mounts the shared volume of the run folders (`runner.logger.log_path`).
RUNS_MOUNT = "/runs"
USAGE = """usage: python -m train_embodied.launch info CONFIG [KEY=VALUE ...]
       python -m train_embodied.launch kuberay CONFIG [KEY=VALUE ...] [--image IMAGE] [--name NAME]
           [--runs-claim PVC]"""


def cluster_info(tc: Any) -> dict[str, int]:
    """The node and GPU counts a launcher must provide for `tc` (`cluster.num_nodes`, `cluster.num_gpus_per_node`)."""
    return {"NUM_NODES": int(tc.cluster.num_nodes), "NUM_GPUS_PER_NODE": int(tc.cluster.num_gpus_per_node)}


def _pod(name: str, image: str, gpus: int, claim: str) -> dict[str, Any]:
    limits: dict[str, Any] = {"nvidia.com/gpu": gpus} if gpus > 0 else {}
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "env": [
            {"name": "MUJOCO_GL", "value": "egl"},
            {"name": "PYOPENGL_PLATFORM", "value": "egl"},
        ],
        "volumeMounts": [
            {"name": "runs", "mountPath": RUNS_MOUNT},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    if limits:
        container["resources"] = {"limits": limits, "requests": dict(limits)}
    return {
        "spec": {
            "containers": [container],
            "volumes": [
                {"name": "runs", "persistentVolumeClaim": {"claimName": claim}},
                {"name": "dshm", "emptyDir": {"medium": "Memory"}},  # Ray's object store
            ],
        }
    }


def rayjob(
    tc: Any, config: str, overrides: Sequence[str], *, image: str, name: str, runs_claim: str
) -> dict[str, Any]:
    """A KubeRay `RayJob` that runs `vla-train config *overrides` on `cluster.num_nodes` pods.

    The head pod is node rank 0 (the driver runs there: the first node of the placement); the workers are one
    group of `num_nodes - 1` replicas. `backoffLimit: 0`: a failed job is not retried here (`runner.max_restarts`
    restarts the run inside the job; to retry the job on a new cluster, raise it together with
    `runner.resume_dir=auto`, which continues the newest run folder with a checkpoint)."""
    import ray

    info = cluster_info(tc)
    gpus = info["NUM_GPUS_PER_NODE"]
    start: dict[str, str] = {"num-gpus": str(gpus)}
    entry = [
        "vla-train",
        config,
        *overrides,
        f"runner.logger.log_path={RUNS_MOUNT}",
        "cluster.backend=ray",
        "cluster.ray_address=auto",
    ]
    spec: dict[str, Any] = {
        "rayVersion": ray.__version__,
        "headGroupSpec": {
            "rayStartParams": dict(start),
            "template": _pod("ray-head", image, gpus, runs_claim),
        },
    }
    workers = info["NUM_NODES"] - 1
    if workers > 0:
        spec["workerGroupSpecs"] = [
            {
                "groupName": "workers",
                "replicas": workers,
                "minReplicas": workers,
                "maxReplicas": workers,
                "rayStartParams": dict(start),
                "template": _pod("ray-worker", image, gpus, runs_claim),
            }
        ]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name},
        "spec": {
            "entrypoint": shlex.join(entry),
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 600,
            "backoffLimit": 0,
            "rayClusterSpec": spec,
        },
    }


def _options(argv: list[str], names: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """Split `--name value` options (of `names`) from the positional arguments."""
    rest, opts = [], {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        key = arg[2:].split("=", 1)[0] if arg.startswith("--") else None
        if key in names:
            if "=" in arg:
                opts[key] = arg.split("=", 1)[1]
            elif i + 1 < len(argv):
                opts[key] = argv[i + 1]
                i += 1
            else:
                raise SystemExit(f"launch: --{key} needs a value\n{USAGE}")
        elif arg.startswith("--"):
            raise SystemExit(f"launch: unknown option {arg}\n{USAGE}")
        else:
            rest.append(arg)
        i += 1
    return rest, opts


def load(config: str, overrides: Sequence[str]) -> Any:
    """The run's config as the cluster will see it (the Ray backend joining the cluster: no check of this machine's
    GPUs, none of model paths that live on the cluster's storage); None after printing its errors."""
    from train_embodied.config import ConfigError, load_train_config

    try:
        return load_train_config(
            config, [*overrides, "cluster.backend=ray", "cluster.ray_address=auto"], check_paths=False
        )
    except ConfigError as exc:
        for line in exc.errors:
            print(f"launch: config error: {line}", file=sys.stderr)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    import yaml

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] not in ("info", "kuberay"):
        print(USAGE, file=sys.stderr)
        return 2
    command = args.pop(0)
    try:
        positional, opts = _options(args, ("image", "name", "runs-claim"))
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    if not positional:
        print(USAGE, file=sys.stderr)
        return 2
    config, overrides = positional[0], positional[1:]
    tc = load(config, overrides)
    if tc is None:
        return 2
    if command == "info":
        print(" ".join(f"{key}={value}" for key, value in cluster_info(tc).items()))
        return 0
    name = opts.get("name") or f"vla-train-{tc.runner.logger.experiment_name}".lower().replace("_", "-")[:63]
    manifest = rayjob(
        tc,
        config,
        overrides,
        image=opts.get("image", "vla-rl:latest"),
        name=name,
        runs_claim=opts.get("runs-claim", "vla-runs"),
    )
    print(yaml.safe_dump(manifest, sort_keys=False), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
