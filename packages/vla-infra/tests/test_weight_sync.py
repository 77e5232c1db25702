"""The actor -> rollout weight protocol: its parts in one process, `WeightSync` across two processes over a real
gloo peer group, and `WeightSyncCoordinator` on real worker groups (in one process; on Ray with a rollout worker
killed and replaced)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import tiny_transformer_jobs as helpers
import weight_sync_workers
from weight_sync_workers import TinyActor, TinyRollout

from vla_infra import LocalBackend, WorkerGroup
from vla_infra.weight_sync import (
    PeerGroup,
    StaleWeightsError,
    TorchDistributedTransport,
    WeightReceiver,
    WeightSender,
    WeightSync,
    WeightSyncCoordinator,
    WeightUpdate,
)
from vla_infra.workers.worker import find_free_port


def state_dicts_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Whether two state dicts have the same keys and bit-identical tensors."""

    def same_bytes(x: torch.Tensor, y: torch.Tensor) -> bool:
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        return torch.equal(
            x.detach().cpu().reshape(-1).view(torch.uint8), y.detach().cpu().reshape(-1).view(torch.uint8)
        )

    return a.keys() == b.keys() and all(same_bytes(a[k], b[k]) for k in a)


def _models() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    actor = helpers.TinyTransformer()
    torch.manual_seed(1)
    rollout = helpers.TinyTransformer()
    return actor, rollout


def test_trainable_only_sends_lora_like_params() -> None:
    actor, _ = _models()
    for name, p in actor.named_parameters():
        p.requires_grad_(name.startswith("head."))
    update = WeightSender(actor, trainable_only=True).build_update()
    assert sorted(update.tensors) == ["head.bias", "head.weight"] and update.version == 1


def test_receiver_refuses_old_versions_unknown_names_and_shapes() -> None:
    actor, rollout = _models()
    sender, receiver = WeightSender(actor), WeightReceiver(rollout)
    u1, u2 = sender.build_update(), sender.build_update()
    assert (u1.version, u2.version) == (1, 2)
    assert receiver.apply(u2) == 2 and state_dicts_equal(actor.state_dict(), rollout.state_dict())
    with pytest.raises(StaleWeightsError, match="update version 1 is not newer than held version 2"):
        receiver.apply(u1)
    with pytest.raises(KeyError, match="nope"):
        receiver.apply(WeightUpdate(version=3, tensors={"nope": torch.zeros(1)}))
    with pytest.raises(ValueError, match=r"head\.bias"):
        receiver.apply(WeightUpdate(version=3, tensors={"head.bias": torch.zeros(3)}))


def test_sender_refuses_a_version_that_is_not_newer() -> None:
    actor, _ = _models()
    sender = WeightSender(actor)
    assert sender.build_update(version=3).version == 3
    with pytest.raises(StaleWeightsError, match="not newer"):
        sender.build_update(version=3)


def test_in_process_load_and_the_version_check_before_generating() -> None:
    actor, rollout = _models()
    sync = WeightSync.receiver(rollout, rank=1)
    with pytest.raises(StaleWeightsError, match="rank 1 holds weight version -1 but the run is at version 1"):
        sync.check_version(1)
    sync.load(actor.state_dict(), 1)
    assert sync.version == 1 and state_dicts_equal(actor.state_dict(), rollout.state_dict())
    sync.check_version(1)
    sync.check_version(None)  # no version named: no check
    with pytest.raises(StaleWeightsError, match="holds weight version 1 but the run is at version 2"):
        sync.check_version(2)
    with pytest.raises(RuntimeError, match="receiver side"):
        WeightSync.sender(actor, rank=0).load(actor.state_dict(), 1)


def test_peer_group_sync_reaches_every_rollout_rank_bit_exactly() -> None:
    """A PeerGroup (own TCP store, no default process group): member 0 sends, members 1-2 receive, in threads."""
    actor, _ = _models()
    port, world = find_free_port(), 3
    results: dict[int, Any] = {}

    def member(rank: int) -> None:
        try:
            peers = PeerGroup("127.0.0.1", port, rank=rank, world_size=world, timeout_s=60)
            transport = TorchDistributedTransport(peers, bucket_bytes=4096, direct_bytes=8192)
            if rank == 0:
                sender = WeightSender(actor)
                sender.version = 4  # a resumed trainer numbers its versions
                update = sender.build_update(version=7)
                transport.send(update)
                results[rank] = update.version
            else:
                rollout = _models()[1]
                receiver = WeightReceiver(rollout)
                update = transport.recv(rollout.state_dict(keep_vars=True))
                results[rank] = (
                    receiver.apply(update),
                    state_dicts_equal(rollout.state_dict(), actor.state_dict()),
                )
        except Exception as exc:  # reported by the assertion below
            results[rank] = exc

    threads = [threading.Thread(target=member, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == {0: 7, 1: (7, True), 2: (7, True)}


def test_a_receiver_expecting_another_version_keeps_its_weights() -> None:
    """An update that is newer than what a receiver holds but not the version it expects is drained and staged,
    never written into the model: the receiver refuses it with its weights as they were."""
    actor, _ = _models()
    port, world = find_free_port(), 2
    results: dict[int, Any] = {}

    def member(rank: int) -> None:
        try:
            peers = PeerGroup("127.0.0.1", port, rank=rank, world_size=world, timeout_s=60)
            transport = TorchDistributedTransport(peers, bucket_bytes=4096, direct_bytes=8192)
            if rank == 0:
                transport.send(WeightSender(actor).build_update(version=3))
            else:
                rollout = _models()[1]
                before = {k: v.clone() for k, v in rollout.state_dict().items()}
                update = transport.recv(
                    rollout.state_dict(keep_vars=True), held_version=1, expected_version=2
                )
                results[rank] = (update.version, state_dicts_equal(rollout.state_dict(), before))
        except Exception as exc:  # reported by the assertion below
            results[rank] = exc

    threads = [threading.Thread(target=member, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == {1: (3, True)}


def test_coordinator_in_one_process_copies_the_actors_weights() -> None:
    """The local backend: actor and rollout workers in this process, a sync loads the actor's state dict."""
    backend = LocalBackend()
    actor = WorkerGroup(TinyActor, 1, backend=backend, name="actor")
    rollout = WorkerGroup(TinyRollout, 2, backend=backend, name="rollout")
    sync = WeightSyncCoordinator(actor, rollout, in_process=True)
    x = torch.ones(1, 8)
    with pytest.raises(StaleWeightsError, match="holds weight version -1 but the run is at version 1"):
        rollout.predict(x, weight_version=1)
    assert sync.sync(1) is None and sync.version == 1
    actor.train_step()
    assert sync.sync(2) is None
    assert rollout.weight_version() == [2, 2]
    assert all(state_dicts_equal(actor.state_dict(), sd) for sd in rollout.state_dict())
    with pytest.raises(
        StaleWeightsError, match="weight version 2 is not newer than the last synced version 2"
    ):
        sync.sync(2)
    rollout.predict(x, weight_version=2)
    sync.resync(0)  # nothing to rebuild in one process
    assert rollout.weight_version() == [2, 2]


# ---------------------------------------------------------------------------------------------- Ray: 2 processes
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep Ray on loopback (before importing ray)


@pytest.fixture(scope="module")
def ray_backend():
    ray = pytest.importorskip("ray")
    cloudpickle = pytest.importorskip("ray.cloudpickle")
    from vla_infra import RayBackend

    if ray.is_initialized():
        ray.shutdown()
    ray.init(
        address="local",  # a new instance, even if another one's "current cluster" file is in /tmp/ray
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        configure_logging=False,
    )
    cloudpickle.register_pickle_by_value(weight_sync_workers)  # Ray workers cannot import the tests folder
    backend = RayBackend(num_nodes=1, num_gpus_per_node=0)
    yield backend
    backend.shutdown()
    cloudpickle.unregister_pickle_by_value(weight_sync_workers)
    ray.shutdown()


@pytest.mark.ray
@pytest.mark.slow
def test_sender_and_receiver_processes_over_gloo_with_a_receiver_restart(ray_backend) -> None:
    """One actor process sends, one rollout process receives, over their own gloo group on 127.0.0.1: bit-exact
    weights, versions checked on both sides; a killed rollout process is replaced and re-synced to the current
    version over a new group before the call that found it dead runs again."""
    actor = WorkerGroup(TinyActor, 1, backend=ray_backend, name="actor")
    rollout = WorkerGroup(TinyRollout, 1, backend=ray_backend, name="rollout", max_restarts=1)
    sync = WeightSyncCoordinator(actor, rollout, in_process=False)
    rollout.on_restart = sync.resync
    try:
        x = torch.ones(1, 8)
        first = sync.sync(1)  # over a new group: every tensor
        assert first == {"tensors": 4, "bytes": sum(t.numel() * 4 for t in actor.state_dict().values())}
        assert rollout.weight_version() == [1] and state_dicts_equal(
            actor.state_dict(), rollout.state_dict()[0]
        )
        with pytest.raises(StaleWeightsError, match="holds weight version 1 but the run is at version 2"):
            rollout.predict(x, weight_version=2)

        actor.train_step()
        second = sync.sync(2)  # the frozen first layer cannot have changed: only the trainable tensors travel
        assert second is not None and second["tensors"] == 2
        assert rollout.weight_version() == [2] and state_dicts_equal(
            actor.state_dict(), rollout.state_dict()[0]
        )
        with pytest.raises(StaleWeightsError, match="not newer than the last synced version 2"):
            sync.sync(2)
        expected = rollout.predict(x, weight_version=2)[0]

        # the rollout process killed between calls: the next call replaces it, the coordinator rebuilds the group
        # and sends version 2 again (every tensor: the new process has its own initial weights), then it runs
        old = rollout.pid()[0]
        os.kill(old, signal.SIGKILL)
        again = rollout.predict(x, weight_version=2)[0]
        assert rollout.restarts == [1] and rollout.pid()[0] != old
        assert torch.equal(again, expected)
        assert rollout.weight_version() == [2] and state_dicts_equal(
            actor.state_dict(), rollout.state_dict()[0]
        )

        actor.train_step()
        assert sync.sync(3) == {"tensors": 2, "bytes": second["bytes"]}
        assert state_dicts_equal(actor.state_dict(), rollout.state_dict()[0])
    finally:
        actor.shutdown()
        rollout.shutdown()
