"""Bytes that pass through the driver process per training iteration on the Ray backend.

Runs `metaworld_ppo_tiny_cpu` (CPU sizes of the e2e tests, evaluation off) through the real runner with
`cluster.backend=ray` for a small and a ~100M-parameter tiny OpenVLA-OFT, and counts in the driver the
serialized bytes of every worker call's arguments and results (Ray pickles exactly these), by method.

Prints, for each model: bytes per iteration, the weight-sync share, and the model's own bytes (what a sync
routed through the driver would carry at least twice: actor -> driver -> rollout). Bounds: the large model's
traffic over the small model's <= 1.05 (driver traffic does not grow with model size) and weight-sync bytes
per iteration <= 64 KiB; the per-iteration total is printed against the 1 MiB target.

Usage: python benchmarks/driver_traffic.py [--epochs 3] [--large-hidden 2048]
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path
from typing import Any

SYNC_METHODS = ("send_weights", "receive_weights", "join_weight_sync", "weight_sync_endpoint")
BASE = [
    "env.train.image_size=32",
    "env.eval.image_size=32",
    "actor.model.image_size=32",
    "env.train.num_envs=2",
    "env.train.envs_per_worker=2",
    "env.train.max_steps_per_rollout_epoch=8",
    "env.train.reward_mode=dense",
    "actor.micro_batch_size=8",
    "actor.global_batch_size=16",
    "algorithm.update_epoch=1",
    "runner.progress_bar=false",
    "runner.logger.logger_backends=[tensorboard]",
    "runner.eval_before_train=false",
    "runner.eval_after_train=false",
    "runner.save_interval=-1",
    "cluster.backend=ray",
]


class Meter:
    """Serialized bytes of worker-call arguments (driver -> worker) and results (worker -> driver), by method."""

    def __init__(self) -> None:
        self.bytes: collections.Counter[str] = collections.Counter()

    def install(self) -> None:
        import ray.cloudpickle as cloudpickle

        from vla_infra.workers import ray_backend

        meter = self
        submit, result = ray_backend.RayWorkerHandle.submit, ray_backend._RayFuture.result

        def counted_submit(handle: Any, method: str, args: tuple, kwargs: dict) -> Any:
            meter.bytes[method] += len(cloudpickle.dumps((args, kwargs)))
            future = submit(handle, method, args, kwargs)
            future.method = method
            return future

        def counted_result(future: Any, timeout: float | None = None) -> Any:
            out = result(future, timeout)
            meter.bytes[getattr(future, "method", "?")] += len(cloudpickle.dumps(out))
            return out

        ray_backend.RayWorkerHandle.submit = counted_submit  # type: ignore[method-assign]
        ray_backend._RayFuture.result = counted_result  # type: ignore[method-assign]


def model_bytes(overrides: list[str]) -> int:
    from train_embodied.config import load_train_config
    from train_embodied.policy_io import build_policy_for_run

    tc = load_train_config("metaworld_ppo_tiny_cpu", overrides)
    policy = build_policy_for_run(tc.actor.model, None, device="cpu")
    return sum(t.numel() * t.element_size() for t in policy.state_dict().values())


def measure(name: str, overrides: list[str], epochs: int, meter: Meter, root: Path) -> dict[str, float]:
    from train_embodied.testing import run_train

    meter.bytes.clear()
    run_train("metaworld_ppo_tiny_cpu", [*BASE, *overrides, f"runner.max_epochs={epochs}"], root / name)
    total = sum(meter.bytes.values())
    sync = sum(meter.bytes[m] for m in SYNC_METHODS)
    top = ", ".join(f"{m} {b / epochs / 1024:.0f} KiB" for m, b in meter.bytes.most_common(4))
    print(
        f"[{name}] per iteration: {total / epochs / 1024:.0f} KiB ({top}); weight sync {sync / epochs:.0f} B"
    )
    return {"total": total / epochs, "sync": sync / epochs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--large-hidden", type=int, default=2048, help="hidden size of the large tiny-family model"
    )
    args = parser.parse_args()
    meter = Meter()
    meter.install()
    sizes = {"small": [], "large": [f"actor.model.extra.hidden_size={args.large_hidden}"]}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in sizes.items():
            mb = model_bytes([*BASE, *extra]) / 2**20
            print(f"[{name}] model: {mb:.1f} MiB of weights ({mb / 4:.1f}M fp32 parameters)")
            results[name] = measure(name, extra, args.epochs, meter, Path(tmp))
    growth = results["large"]["total"] / results["small"]["total"]
    sync = max(r["sync"] for r in results.values())
    per_iter = results["large"]["total"] / 2**20
    ok = growth <= 1.05 and sync <= 64 * 1024
    print(f"driver traffic large/small model: {growth:.3f} (bound <= 1.05)")
    print(f"weight-sync bytes through the driver per iteration: {sync:.0f} B (bound <= 64 KiB)")
    print(f"driver traffic per iteration: {per_iter:.2f} MiB (target < 1 MiB)")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
