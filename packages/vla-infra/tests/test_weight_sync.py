"""Weight sync actor -> rollout: in-process transport and a torch.distributed broadcast across processes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import tiny_transformer_jobs as helpers

from vla_infra.weight_sync import (
    InProcessTransport,
    StaleWeightsError,
    WeightReceiver,
    WeightSender,
    WeightSync,
    WeightUpdate,
    check_staleness,
    state_dicts_equal,
)


def _models() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    actor = helpers.TinyTransformer()
    torch.manual_seed(1)
    rollout = helpers.TinyTransformer()
    return actor, rollout


def test_full_sync_in_process_copies_weights_and_increments_version() -> None:
    actor, rollout = _models()
    assert not state_dicts_equal(actor.state_dict(), rollout.state_dict())
    sync = WeightSync(actor_model=actor, rollout_model=rollout)
    assert sync.sync() == 1
    assert state_dicts_equal(actor.state_dict(), rollout.state_dict())
    helpers.train_reference(actor, helpers.make_batches(1, 4))
    assert not state_dicts_equal(actor.state_dict(), rollout.state_dict())
    assert sync.sync() == 2
    assert state_dicts_equal(actor.state_dict(), rollout.state_dict())


def test_delta_sync_sends_only_changed_tensors() -> None:
    actor, rollout = _models()
    sender, receiver = WeightSender(actor, mode="delta"), WeightReceiver(rollout)
    first = sender.build_update()
    assert first is not None and first.kind == "full" and set(first.tensors) == set(actor.state_dict())
    receiver.apply(first)
    with torch.no_grad():
        actor.blocks[1].mlp[0].weight[0, 0] += 1.0
    second = sender.build_update()
    assert second is not None and second.kind == "delta" and second.base_version == 1
    assert list(second.tensors) == ["blocks.1.mlp.0.weight"]
    assert receiver.apply(second) == 2
    assert state_dicts_equal(actor.state_dict(), rollout.state_dict())
    third = sender.build_update()  # nothing changed: an empty delta still bumps the version
    assert third is not None and third.tensors == {} and third.version == 3


def test_trainable_only_sends_lora_like_params() -> None:
    actor, rollout = _models()
    for name, p in actor.named_parameters():
        p.requires_grad_(name.startswith("head."))
    before = {k: v.clone() for k, v in rollout.state_dict().items()}
    sync = WeightSync(actor_model=actor, rollout_model=rollout, trainable_only=True)
    sync.sync()
    after = rollout.state_dict()
    for k, v in after.items():
        assert torch.equal(v, actor.state_dict()[k] if k.startswith("head.") else before[k]), k


def test_stale_and_missed_updates_are_refused() -> None:
    actor, rollout = _models()
    sender, receiver = WeightSender(actor, mode="delta"), WeightReceiver(rollout)
    u1, u2, u3 = sender.build_update(), sender.build_update(), sender.build_update()
    assert (u1.version, u2.version, u3.version) == (1, 2, 3)  # type: ignore[union-attr]
    receiver.apply(u1)  # type: ignore[arg-type]
    with pytest.raises(StaleWeightsError, match="not newer"):
        receiver.apply(u1)  # type: ignore[arg-type]
    with pytest.raises(StaleWeightsError, match="based on version 2"):
        receiver.apply(u3)  # type: ignore[arg-type]  # u2 was missed
    check_staleness(4, 5, max_staleness=1)
    with pytest.raises(StaleWeightsError, match="version 3 but the actor is at version 5"):
        check_staleness(3, 5, max_staleness=1)


def test_receiver_rejects_unknown_names_and_shapes() -> None:
    _, rollout = _models()
    receiver = WeightReceiver(rollout)
    with pytest.raises(KeyError, match="nope"):
        receiver.apply(WeightUpdate(version=1, base_version=None, tensors={"nope": torch.zeros(1)}))
    with pytest.raises(ValueError, match=r"head\.bias"):
        receiver.apply(WeightUpdate(version=1, base_version=None, tensors={"head.bias": torch.zeros(3)}))
    with pytest.raises(ValueError, match="mode='patch'"):
        WeightSender(rollout, mode="patch")  # type: ignore[arg-type]


def test_in_process_transport_keeps_order() -> None:
    transport = InProcessTransport()
    assert transport.recv() is None
    for v in (1, 2):
        transport.send(WeightUpdate(version=v, base_version=None, tensors={}))
    assert [transport.recv().version, transport.recv().version] == [1, 2]  # type: ignore[union-attr]


def test_in_process_update_keeps_the_weights_of_send_time() -> None:
    actor, rollout = _models()
    transport = InProcessTransport()
    sender, receiver = WeightSender(actor), WeightReceiver(rollout)
    update = sender.build_update()
    assert update is not None
    transport.send(update)
    at_send = {k: v.clone() for k, v in actor.state_dict().items()}
    helpers.train_reference(
        actor, helpers.make_batches(1, 4)
    )  # an optimizer step before the receiver applies
    assert not state_dicts_equal(actor.state_dict(), at_send)
    received = transport.recv()
    assert received is not None and receiver.apply(received) == 1
    assert state_dicts_equal(rollout.state_dict(), at_send)


@pytest.fixture(scope="module")
def two_processes() -> list[dict[str, Any]]:
    # One two-process run serves test_fsdp.py and test_weight_sync.py (cached in the helpers module).
    return helpers.two_rank_results()["sync"]


@pytest.mark.slow
def test_distributed_full_sync_rollout_equals_actor(two_processes: list[dict[str, Any]]) -> None:
    actor, rollout = two_processes
    assert (actor["v1"], actor["v2"]) == (1, 2)
    assert (rollout["v1"], rollout["v2"]) == (1, 2)
    assert rollout["equal_v1"] and rollout["equal_v2"]
    assert rollout["stale_detected"]


@pytest.mark.slow
def test_distributed_delta_trainable_only(two_processes: list[dict[str, Any]]) -> None:
    rollout = two_processes[1]
    assert (rollout["delta_v1_kind"], rollout["delta_v1_names"]) == ("full", ["head.bias", "head.weight"])
    assert (rollout["delta_v2_kind"], rollout["delta_v2_names"]) == ("delta", ["head.bias"])
    assert rollout["delta_v2"] == 2 and rollout["delta_head_equal"]


def test_peer_group_sync_reaches_every_rollout_rank_bit_exactly() -> None:
    """A PeerGroup (own TCP store, no default process group): rank 0 sends, ranks 1-2 receive, in threads."""
    import threading

    from vla_infra.weight_sync import PeerGroup, TorchDistributedTransport
    from vla_infra.workers.worker import find_free_port

    actor, _ = _models()
    port, world = find_free_port(), 3
    results: dict[int, Any] = {}

    def member(rank: int) -> None:
        try:
            peers = PeerGroup("127.0.0.1", port, rank=rank, world_size=world, timeout_s=60)
            transport = TorchDistributedTransport(peers=peers, bucket_bytes=4096, direct_bytes=8192)
            if rank == 0:
                sender = WeightSender(actor)
                sender.version = 4  # a resumed trainer numbers its versions
                update = sender.build_update(version=7)
                assert update is not None
                transport.send(update)
                results[rank] = update.version
            else:
                rollout = _models()[1]
                receiver = WeightReceiver(rollout)
                update = transport.recv()
                assert update is not None
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


def test_sender_refuses_a_version_that_is_not_newer() -> None:
    actor, _ = _models()
    sender = WeightSender(actor)
    assert sender.build_update(version=3).version == 3  # type: ignore[union-attr]
    with pytest.raises(StaleWeightsError, match="not newer"):
        sender.build_update(version=3)
