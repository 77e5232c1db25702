"""Training across two Ray nodes (a fake two-node cluster on 127.0.0.1, `tests/two_nodes.py`), on real MetaWorld with
the tiny OpenVLA-OFT: PPO with the env and rollout workers on node 0 and the actor on node 1, GRPO with actor ranks
on both nodes (FSDP2 over gloo across the nodes) train what the one-node run trains, within the data-parallel test's
tolerance (rel 1e-4 on the logged losses, `weights_compare.WEIGHT_TOL` absolute on the weights). The
weights cross the node boundary worker to worker (torch.distributed over gloo): after every sync the rollout ranks
hold the actor's weights bit for bit while the driver carried a few hundred bytes of them per iteration.

A node lost mid-run (`Cluster.remove_node` of the actor's node after the first checkpoint) ends the run within a
bounded time in one line naming the node and the last complete checkpoint, leaving no worker process; with
`runner.max_restarts=1` the run waits for a replacement node, resumes from that checkpoint and ends with the weights
and metrics of an uninterrupted run resumed from it."""

from __future__ import annotations

import json
import math
import re
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from train_embodied.testing import GRPO_TINY, PPO_TINY, read_metrics, run_train

pytestmark = [pytest.mark.slow, pytest.mark.ray]
pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")
ray = pytest.importorskip("ray")

from two_nodes import HYBRID, SEPARATION, DriverBytes, TwoNodes, node_ranks  # noqa: E402

EPOCHS = 2
COMMON = [
    f"runner.max_epochs={EPOCHS}",
    "runner.save_interval=-1",
    "runner.eval_before_train=false",
    "runner.eval_after_train=false",
    "algorithm.update_epoch=1",
    "actor.micro_batch_size=4",
]
FSDP = ["hybrid_engines@actor.fsdp_config=fsdp", "actor.fsdp_config.mixed_precision.param_dtype=fp32"]
RUNS = {
    # the guides' complete separation: env and rollout on node 0, the actor on node 1
    "ppo": ("metaworld_ppo_tiny_cpu", PPO_TINY, SEPARATION, []),
    # the guides' hybrid layout: env on node 0, rollout on node 1, one actor rank on each (2 groups of 2 envs)
    "grpo": ("metaworld_grpo_tiny_cpu", GRPO_TINY, HYBRID, FSDP),
}
COMPARED = ("train/actor/policy_loss", "train/actor/grad_norm", "train/loss", "rollout/advantages_max")
# where each group runs: node rank of each rank
PLACED = {
    "ppo": {"env_train_0": [0], "rollout": [0], "actor": [1]},
    "grpo": {"env_train_0": [0], "rollout": [1], "actor": [0, 1]},
}


@pytest.fixture(scope="module")
def cluster():
    if ray.is_initialized():
        ray.shutdown()
    nodes = TwoNodes()
    yield nodes
    if ray.is_initialized():
        ray.shutdown()
    nodes.shutdown()


def _train_rows(log_dir: Path) -> dict[int, dict[str, float]]:
    return {r["step"]: r for r in read_metrics(log_dir) if "train/actor/policy_loss" in r}


# GRPO in the hybrid layout across two nodes takes 2-3 minutes on 2 cores: `long`; PPO in the complete separation
# checks the cross-node placement, weight sync and parity in the default run
@pytest.mark.parametrize(
    "algo", [pytest.param(a, marks=[pytest.mark.long] if a == "grpo" else []) for a in sorted(RUNS)]
)
def test_two_nodes_train_like_one(algo: str, cluster: TwoNodes, tmp_path: Path, monkeypatch) -> None:
    from weights_compare import WEIGHT_TOL, check_weights_at_every_sync

    cluster.ensure_worker_node()
    config, overrides, placement, extra = RUNS[algo]
    placed: dict[str, list[int]] = {}

    def where_placed(workers) -> None:
        if not placed:
            for group in (workers.env_train[0], workers.rollout, workers.actor):
                placed[group.name] = node_ranks([seen["node_id"] for seen in group.ping()])

    synced = check_weights_at_every_sync(monkeypatch, where_placed)
    meter = DriverBytes()
    meter.install(monkeypatch)
    run_train(config, [*overrides, *COMMON, *extra, *cluster.overrides(placement)], tmp_path / "two")
    assert placed == PLACED[algo]
    assert synced == [1, 2]
    assert not ray.is_initialized()  # the run disconnected from the cluster it joined
    # the weights crossed worker to worker: the driver carried version numbers (about 100 B a sync), not the
    # model's megabytes; the rest is the env <-> rollout loop, which does not grow with the model (the checks
    # above pull state dicts and pings through the driver: not the run's traffic)
    assert meter.sync / EPOCHS < 4096, meter.bytes
    run_bytes = meter.total - meter.bytes["state_dict"] - meter.bytes["ping"]
    assert run_bytes / EPOCHS < 1024 * 1024, meter.bytes

    run_train(config, [*overrides, *COMMON], tmp_path / "one")
    two, one = _train_rows(tmp_path / "two"), _train_rows(tmp_path / "one")
    assert sorted(two) == sorted(one) == [1, 2]
    for step in (1, 2):
        assert two[step]["train/actor/num_samples"] == one[step]["train/actor/num_samples"]
        assert math.isclose(two[step]["rollout/rewards"], one[step]["rollout/rewards"], rel_tol=1e-5)
        for key in COMPARED:
            assert math.isclose(two[step][key], one[step][key], rel_tol=1e-4, abs_tol=1e-6), (step, key)
        assert two[step]["train/actor/first_minibatch_approx_kl"] < 1e-6
    a = load_file(str(tmp_path / "two" / "checkpoints" / "global_step_2" / "model.safetensors"))
    b = load_file(str(tmp_path / "one" / "checkpoints" / "global_step_2" / "model.safetensors"))
    assert a.keys() == b.keys()
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < WEIGHT_TOL


# ---------------------------------------------------------------------------------------------- a node lost mid-run
LOSS = [
    *PPO_TINY,
    "runner.save_interval=1",
    "runner.eval_before_train=false",
    "runner.eval_after_train=false",
    "algorithm.update_epoch=1",
]


def _lose_node_after(
    cluster: TwoNodes, log_dir: Path, step: int, back_after_s: float | None, times: dict
) -> None:
    """Remove node 1 once checkpoint `step` is complete; with `back_after_s`, add a replacement that long after."""
    from vla_infra import checkpoint_problem

    ckpt = log_dir / "checkpoints" / f"global_step_{step}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (ckpt.is_dir() and checkpoint_problem(ckpt) is None):
        time.sleep(0.05)
    try:
        times["removed"] = cluster.remove_worker_node()
        if back_after_s is not None:
            time.sleep(back_after_s)
            cluster.add_worker_node()
            times["added"] = time.monotonic()
    except Exception as exc:  # reported by the test (a thread's exception would go unseen)
        times["error"] = repr(exc)


def _gone(pids: list[int], within_s: float) -> list[int]:
    """The pids still running after waiting up to `within_s` seconds for them to exit."""
    import psutil

    deadline = time.monotonic() + within_s
    while True:
        alive = [
            p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        ]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def test_node_loss_ends_the_run_in_one_line(cluster: TwoNodes, tmp_path: Path, capsys) -> None:
    """Node 1 (the actor's) is removed after the first checkpoint: the run ends within a bounded time with one line
    naming the lost node and the last complete checkpoint (intact), and no worker process is left."""
    from train_embodied.cli import train_main
    from vla_infra import checkpoint_problem, latest_checkpoint

    cluster.ensure_worker_node()
    log_dir = tmp_path / "run"
    times: dict[str, float] = {}
    thread = threading.Thread(target=_lose_node_after, args=(cluster, log_dir, 1, None, times), daemon=True)
    thread.start()
    overrides = [*LOSS, "runner.max_epochs=50", *cluster.overrides(SEPARATION)]
    code = train_main(["metaworld_ppo_tiny_cpu", *overrides, f"runner.logger.log_dir={log_dir}"])
    ended = time.monotonic()
    cluster.add_worker_node()  # the next test's cluster
    err = capsys.readouterr().err
    assert code == 1, err
    lines = [line for line in err.strip().splitlines() if line.startswith("vla-train:")]
    assert len(lines) == 1 and lines[0] == err.strip().splitlines()[-1], err
    assert "Traceback" not in err
    last = latest_checkpoint(log_dir / "checkpoints")
    assert last is not None and checkpoint_problem(last, checksums=True) is None
    assert lines[0].startswith("vla-train: error: node 1 (127.0.0.1, id ")
    assert "left the cluster; worker actor rank 0 (pid " in lines[0]
    assert lines[0].endswith(f"; last complete checkpoint: {last}; workers stopped")
    print(f"node loss -> one-line exit: {ended - times['removed']:.1f} s")
    assert ended - times["removed"] < 60.0
    pids = [p for group in json.loads((log_dir / "worker_pids.json").read_text()).values() for p in group]
    assert _gone(pids, 15.0) == []


@pytest.mark.long  # about 4 minutes on 2 cores: the node-loss line itself is checked in the default run
def test_node_loss_restarts_from_the_last_checkpoint(cluster: TwoNodes, tmp_path: Path, capsys) -> None:
    """With runner.max_restarts=1 the run waits for a node to take node 1's place, starts again from its last complete
    checkpoint and ends with the weights and metrics of an uninterrupted run resumed from that checkpoint."""
    from train_embodied.cli import train_main

    cluster.ensure_worker_node()
    log_dir = tmp_path / "run"
    times: dict[str, float] = {}
    thread = threading.Thread(target=_lose_node_after, args=(cluster, log_dir, 1, 5.0, times), daemon=True)
    thread.start()
    # the replacement node joins about 5 s after the loss; the restarted run waits for it at most 300 s
    overrides = [
        *LOSS,
        "runner.max_epochs=3",
        "cluster.worker_start_timeout_s=300",
        *cluster.overrides(SEPARATION),
    ]
    code = train_main(
        ["metaworld_ppo_tiny_cpu", *overrides, "runner.max_restarts=1", f"runner.logger.log_dir={log_dir}"]
    )
    thread.join(timeout=60)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "[restart] 1 of runner.max_restarts=1 after: node 1 (127.0.0.1, id " in out
    resumed = re.search(r"\[resume\] from (\S+) at iteration (\d+)", out)
    assert resumed is not None, out
    start = int(resumed.group(2))
    assert "error" not in times, times
    assert 1 <= start < 3 and "added" in times

    # the reference: the same cluster and placement, uninterrupted from a copy of that checkpoint
    copy = tmp_path / "from" / f"global_step_{start}"
    shutil.copytree(resumed.group(1), copy)
    run_train("metaworld_ppo_tiny_cpu", [*overrides, f"runner.resume_dir={copy}"], tmp_path / "reference")
    rows, ref = _train_rows(log_dir), _train_rows(tmp_path / "reference")
    assert sorted(rows) == [1, 2, 3] and sorted(ref) == list(range(start + 1, 4))
    for step in ref:
        for key in (*COMPARED, "rollout/rewards", "train/actor/num_samples"):
            assert rows[step][key] == ref[step][key], (step, key)
    a = load_file(str(log_dir / "checkpoints" / "global_step_3" / "model.safetensors"))
    b = load_file(str(tmp_path / "reference" / "checkpoints" / "global_step_3" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
