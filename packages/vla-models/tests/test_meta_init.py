"""Checkpoint-backed construction puts parameters on `meta` only for the thread that loads: the local backend runs
workers on threads, and a module another thread builds meanwhile, or after overlapping loads, keeps real weights."""

from __future__ import annotations

import threading

from torch import nn

from vla_models.meta_init import checkpoint_backed, weights_from_checkpoint


def _load_in_thread(
    out: dict, key: str, entered: threading.Event, leave: threading.Event
) -> threading.Thread:
    def load() -> None:
        with weights_from_checkpoint(), checkpoint_backed():
            out[key] = nn.Linear(4, 4)
            entered.set()
            leave.wait(30)

    thread = threading.Thread(target=load)
    thread.start()
    return thread


def test_a_module_built_on_another_thread_during_a_load_has_real_weights() -> None:
    out: dict = {}
    entered, leave = threading.Event(), threading.Event()
    loader = _load_in_thread(out, "loaded", entered, leave)
    assert entered.wait(30)
    other = nn.Linear(4, 4)  # this thread, while the loader is inside its checkpoint-backed build
    leave.set()
    loader.join(30)
    assert out["loaded"].weight.is_meta and out["loaded"].bias.is_meta
    assert not other.weight.is_meta and not other.bias.is_meta


def test_overlapping_loads_that_end_out_of_order_leave_construction_unchanged() -> None:
    out: dict = {}
    a_in, a_out, b_in, b_out = (threading.Event() for _ in range(4))
    a = _load_in_thread(out, "a", a_in, a_out)
    assert a_in.wait(30)
    b = _load_in_thread(out, "b", b_in, b_out)
    assert b_in.wait(30)
    a_out.set()  # the first load ends while the second is still inside
    a.join(30)
    b_out.set()
    b.join(30)
    assert out["a"].weight.is_meta and out["b"].weight.is_meta
    assert not nn.Linear(4, 4).weight.is_meta


def test_outside_a_load_checkpoint_backed_changes_nothing() -> None:
    with checkpoint_backed():
        layer = nn.Linear(4, 4)
    assert not layer.weight.is_meta
