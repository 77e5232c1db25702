"""A training run across two Ray nodes, and the loss of one: driver traffic and the time to a one-line exit.

A fake two-node Ray cluster on this machine (`tests/two_nodes.py`: `ray.cluster_utils`, 127.0.0.1, each node with its
own CPUs and `vla-infra/node-rank` label) runs `metaworld_ppo_tiny_cpu` at the e2e tests' sizes with the guides'
complete-separation layout: env and rollout workers on node 0, the actor on node 1.

1. `--epochs` iterations, counting in the driver the serialized arguments and results of every worker call (as
   `benchmarks/driver_traffic.py` does): bytes per iteration, of which weight sync, against the model's size.
   Bounds: weight-sync bytes per iteration <= 64 KiB (the weights cross the node boundary worker to worker), the
   total under the 1 MiB target.
2. The same run with a checkpoint every iteration; node 1 is removed (`Cluster.remove_node`) once the first
   checkpoint is complete. Prints the seconds from the removal to the run's exit and its one line. Bound: 60 s.

    python benchmarks/two_node_run.py [--epochs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from two_nodes import SEPARATION, DriverBytes, TwoNodes  # noqa: E402

RUN = [
    "env.train.image_size=32",
    "env.eval.image_size=32",
    "actor.model.image_size=32",
    "env.train.num_envs=2",
    "env.train.envs_per_worker=2",
    "env.eval.num_envs=2",
    "env.eval.envs_per_worker=2",
    "env.train.max_steps_per_rollout_epoch=8",
    "env.train.reward_mode=dense",
    "actor.micro_batch_size=8",
    "actor.global_batch_size=16",
    "algorithm.update_epoch=1",
    "runner.progress_bar=false",
    "runner.logger.logger_backends=[tensorboard]",
    "runner.eval_before_train=false",
    "runner.eval_after_train=false",
]


class _Patch:
    """`setattr` that remembers the originals (what DriverBytes.install needs outside pytest)."""

    def __init__(self) -> None:
        self.undo: list[tuple[object, str, object]] = []

    def setattr(self, obj: object, name: str, value: object) -> None:
        self.undo.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def restore(self) -> None:
        for obj, name, value in reversed(self.undo):
            setattr(obj, name, value)


def traffic(cluster: TwoNodes, epochs: int, root: Path) -> tuple[float, float]:
    from train_embodied.testing import run_train

    meter, patch = DriverBytes(), _Patch()
    meter.install(patch)
    try:
        overrides = [
            *RUN,
            f"runner.max_epochs={epochs}",
            "runner.save_interval=-1",
            *cluster.overrides(SEPARATION),
        ]
        run_train("metaworld_ppo_tiny_cpu", overrides, root / "traffic")
    finally:
        patch.restore()
    top = ", ".join(f"{m} {b / epochs / 1024:.0f} KiB" for m, b in meter.bytes.most_common(4))
    per = meter.total / epochs / 1024
    print(f"[traffic] per iteration: {per:.0f} KiB ({top}); weight sync {meter.sync / epochs:.0f} B")
    return meter.total / epochs, meter.sync / epochs


def node_loss(cluster: TwoNodes, root: Path) -> tuple[float, str]:
    from train_embodied.cli import train_main
    from vla_infra import checkpoint_problem

    log_dir = root / "loss"
    removed: list[float] = []

    def lose_node() -> None:
        ckpt = log_dir / "checkpoints" / "global_step_1"
        while not (ckpt.is_dir() and checkpoint_problem(ckpt) is None):
            time.sleep(0.05)
        removed.append(cluster.remove_worker_node())

    threading.Thread(target=lose_node, daemon=True).start()
    err = io.StringIO()
    overrides = [*RUN, "runner.max_epochs=50", "runner.save_interval=1", *cluster.overrides(SEPARATION)]
    with contextlib.redirect_stderr(err):
        code = train_main(["metaworld_ppo_tiny_cpu", *overrides, f"runner.logger.log_dir={log_dir}"])
    took = time.monotonic() - removed[0]
    line = next((x for x in err.getvalue().splitlines() if x.startswith("vla-train:")), "")
    print(f"[node loss] exit {code} {took:.1f} s after node 1 was removed: {line}")
    return took, line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    from train_embodied.config import load_train_config
    from train_embodied.policy_io import build_policy_for_run

    tc = load_train_config("metaworld_ppo_tiny_cpu", RUN)
    policy = build_policy_for_run(tc.actor.model, None, device="cpu")
    model = sum(t.numel() * t.element_size() for t in policy.state_dict().values())
    print(f"[model] {model / 2**20:.1f} MiB of weights")
    cluster = TwoNodes()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            total, sync = traffic(cluster, args.epochs, Path(tmp))
            took, line = node_loss(cluster, Path(tmp))
    finally:
        cluster.shutdown()
    ok = sync <= 64 * 1024 and took <= 60.0 and "left the cluster" in line
    print(f"driver traffic per iteration across two nodes: {total / 1024:.0f} KiB (target < 1024 KiB)")
    print(
        f"weight-sync bytes through the driver per iteration: {sync:.0f} B (bound <= 64 KiB; model {model} B)"
    )
    print(f"node loss -> one-line exit: {took:.1f} s (bound <= 60 s)")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
