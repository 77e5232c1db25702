"""Real Ray on a fake 8-GPU node (127.0.0.1 only): every single-node layout of the reference documents puts
each process on its GPU, dispatch works across actors, RayChannel moves data, torch.distributed rendezvous."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep Ray on loopback (before importing ray)
ray = pytest.importorskip("ray")
cloudpickle = pytest.importorskip("ray.cloudpickle")

sys.path.insert(0, str(Path(__file__).parent))
import probe_workers  # noqa: E402
import restart_workers  # noqa: E402
from probe_workers import (  # noqa: E402
    Probe,
)
from restart_workers import RestartProbe  # noqa: E402

from vla_infra import RayBackend, WorkerGroup, resolve_placement  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

LAYOUTS = {
    "hybrid (002)": {"env": "0-3", "rollout": "4-7", "actor": "0-7"},
    "complete sharing": {"env,rollout,actor": "all"},
    "complete separation (002)": {"env": "0-1", "rollout": "2-5", "actor": "6-7"},
    "two processes per GPU": {"env": "0-3:0-7", "rollout": "4-7"},
}


@pytest.fixture(scope="module")
def ray_node():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(
        address="local",  # a new instance, even if another one's "current cluster" file is in /tmp/ray
        num_cpus=2,
        num_gpus=8,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        configure_logging=False,
    )
    # Worker classes of the tests travel by value: Ray workers cannot import the tests folder.
    cloudpickle.register_pickle_by_value(probe_workers)
    cloudpickle.register_pickle_by_value(restart_workers)
    backend = RayBackend(num_nodes=1, num_gpus_per_node=8)
    yield backend
    backend.shutdown()
    cloudpickle.unregister_pickle_by_value(probe_workers)
    cloudpickle.unregister_pickle_by_value(restart_workers)
    ray.shutdown()


def assert_on_right_gpus(backend, layout):
    placement = resolve_placement(layout, num_nodes=1, num_gpus_per_node=8)
    groups = {name: WorkerGroup(Probe, procs, backend=backend) for name, procs in placement.items()}
    try:
        pids = set()
        for name, group in groups.items():
            for proc, seen in zip(placement[name], group.ping()):
                assert seen["cuda_visible_devices"] == str(proc.local_gpu), (name, proc)
                assert seen["gpu_ids"] == [proc.local_gpu], (name, proc)
                assert seen["node_id"] == backend.node_ids[proc.node_rank]
                info = seen["info"]
                assert (info.group, info.rank, info.world_size, info.device) == (
                    name,
                    proc.rank,
                    len(group.handles),
                    "cuda:0",
                )
                assert seen["env"]["MASTER_ADDR"] == "127.0.0.1" and seen["env"]["RANK"] == str(proc.rank)
                pids.add(seen["pid"])
        assert len(pids) == sum(len(p) for p in placement.values())  # one process per placed worker
    finally:
        for group in groups.values():
            group.shutdown()


@pytest.mark.parametrize("layout", list(LAYOUTS), ids=list(LAYOUTS))
def test_layout_places_each_process_on_its_gpu(ray_node, layout):
    assert_on_right_gpus(ray_node, LAYOUTS[layout])


def test_dispatch_channel_and_distributed_rendezvous(ray_node):
    cpu = RayBackend(num_nodes=1, num_gpus_per_node=0)
    placement = resolve_placement({"env": "0:0-1", "actor": "0"}, num_nodes=1, num_gpus_per_node=0)
    producers = WorkerGroup(Probe, placement["env"], backend=cpu)
    consumer = WorkerGroup(Probe, placement["actor"], backend=cpu)
    try:
        # split/concat across actors
        np.testing.assert_array_equal(producers.double(np.arange(5)), np.arange(5) * 2)
        assert [s["cuda_visible_devices"] in (None, "") for s in producers.ping()] == [True, True]
        # two producer actors -> one consumer actor and the driver, bounded, keyed by producer rank
        channel = cpu.create_channel(maxsize=2, name="trajectories")
        produced = producers.produce.submit(channel, 5)
        got_by_actor = consumer.consume(channel, 0, 5)[0]
        got_by_driver = [channel.get(key=1, timeout=60)["i"] for _ in range(5)]
        assert produced.result(timeout=60) == [5, 5]
        assert got_by_actor == list(range(5)) and got_by_driver == list(range(5))
        assert channel.qsize(0) == 0
        with pytest.raises(Exception, match="empty"):
            channel.get(key=0, timeout=0.2)
        channel.shutdown()
        # torch.distributed across the two env actors via MASTER_ADDR/MASTER_PORT
        assert producers.allreduce_rank() == [1.0, 1.0]
    finally:
        producers.shutdown()
        consumer.shutdown()


def test_backend_refuses_more_nodes_than_cluster(ray_node):
    with pytest.raises(ValueError, match="num_nodes=2"):
        RayBackend(num_nodes=2, num_gpus_per_node=8)


def _kill_process(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def _kill_actor(actor) -> None:
    """`ray.kill`, then wait until the actor answers no more: the kill is only requested, and a call made at once can
    still reach the live actor."""
    from ray.exceptions import RayActorError

    ray.kill(actor)
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        try:
            ray.get(actor.gpu_ids.remote(), timeout=10)
        except RayActorError:
            return
        time.sleep(0.1)
    raise AssertionError("a killed Ray actor still answers after 60 s")


def test_dead_actor_is_restarted_with_replayed_state_then_lost(ray_node):
    """A Ray actor killed between calls (its process SIGKILLed, or ray.kill) is replaced on the next call: the
    last call of each replayed method runs again in the order they were made, then on_restart, then recover,
    then the failed call; one death more than max_restarts raises WorkerLost."""
    from ray.exceptions import RayActorError

    from vla_infra import WorkerLost

    cpu = RayBackend(num_nodes=1, num_gpus_per_node=0)
    group = WorkerGroup(RestartProbe, 2, backend=cpu, name="probe", kwargs={"start": 10.0}, max_restarts=1)
    seen = []
    group.on_restart = lambda rank: seen.append((rank, group.execute_rank(rank, "state")))
    try:
        group.set_value(5.0)
        group.scale(3.0)
        group.set_value(7.0)
        group.scale(2.0)  # replayed: set_value(7) then scale(2) = 14 (the other order would give 7)
        assert group.add(0.5) == [14.5, 14.5]  # add is not replayed
        before = group.state()
        _kill_process(before[1]["pid"])
        assert group.add(1.0) == [15.5, 15.0]  # rank 1: replayed 14, then the retried add
        assert group.restarts == [0, 1] and group.num_restarts == 1
        assert [rank for rank, _ in seen] == [1]
        assert seen[0][1]["value"] == 14.0 and not seen[0][1]["recovered"]  # on_restart runs before recover
        after = group.state()
        assert after[1]["recovered"] and not after[0]["recovered"]
        assert after[1]["pid"] != before[1]["pid"] and after[0]["pid"] == before[0]["pid"]
        # the asynchronous path (submit) restarts too
        _kill_actor(group.handles[0].actor)
        assert group.add.submit(1.0).result(timeout=120) == [15.0, 16.0]
        assert group.restarts == [1, 1]
        # a call that must not restart raises the backend's error and uses no restart
        _kill_actor(group.handles[1].actor)
        with pytest.raises(RayActorError):
            group.finish()
        # one more death than max_restarts: the run ends, naming the group, the rank and the last error
        with pytest.raises(
            WorkerLost, match=r"'probe' lost rank 1.*1 restart.*max_restarts=1.*ActorDiedError"
        ) as lost:
            group.add(1.0)
        assert (lost.value.group, lost.value.rank, lost.value.restarts) == ("probe", 1, 1)
        assert group.restarts == [1, 1]
    finally:
        group.shutdown()


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def test_a_stopped_actor_times_out_by_name_and_is_killed(ray_node):
    """`kill -STOP` stands in for a GPU kernel that never returns: the call gives up after the group's timeout
    naming the rank, its process and node, and shutdown kills the stopped process without waiting for it."""
    from vla_infra import WorkerTimeout, phase

    cpu = RayBackend(num_nodes=1, num_gpus_per_node=0)
    group = WorkerGroup(Probe, 2, backend=cpu, name="probe", timeout_s=3.0, start_timeout_s=120.0)
    pids = [s["pid"] for s in group.ping()]
    os.kill(pids[1], signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(WorkerTimeout) as caught, phase("generate_rollouts"):
            group.double(np.arange(4))
        assert time.monotonic() - t0 < 3.0 + 10.0
        exc = caught.value
        assert (exc.ranks, exc.method, exc.phase) == ([1], "double", "generate_rollouts")
        assert (
            f"worker probe rank 1 (pid {pids[1]} on node 127.0.0.1) in double: no answer within 3 s"
            in str(exc)
        )
        t0 = time.monotonic()
        group.shutdown()
        assert time.monotonic() - t0 < 10.0  # the stopped actor is not asked to close
        assert _gone(pids[1], 30.0) and _gone(pids[0], 30.0)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
