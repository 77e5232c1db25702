"""Every call the driver waits on has a timeout: on the local backend a call that does not return within the
group's `timeout_s` raises WorkerTimeout naming the group, the ranks still running, the method and the phase;
those ranks are hung from then on (a new call fails at once) and shutdown stops them without waiting, through the
worker's `abort` hook."""

from __future__ import annotations

import threading
import time

import pytest

from vla_infra import Worker, WorkerGroup, WorkerTimeout, phase, register
from vla_infra.logging import StepTimer


class Blocking(Worker):
    """`block` waits until `abort` (or `seconds`); rank 1 of a group answers `block_rank0` at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.aborted = False

    def block(self, seconds: float) -> float:
        self.release.wait(seconds)
        return seconds

    def block_rank0(self, seconds: float) -> int:
        if self.rank == 0:
            self.release.wait(seconds)
        return self.rank

    @register("rank_zero")
    def thread_id(self) -> int:
        return threading.get_ident()

    def quick(self) -> int:
        return self.rank

    def abort(self) -> None:
        self.aborted = True
        self.release.set()


def test_a_call_past_the_timeout_names_the_running_ranks_method_and_phase() -> None:
    group = WorkerGroup(Blocking, 2, timeout_s=0.5)
    workers = [h.worker for h in group.handles]
    t0 = time.monotonic()
    with pytest.raises(WorkerTimeout) as caught, phase("generate_rollouts"):
        group.block(60.0)
    assert time.monotonic() - t0 < 5.0
    exc = caught.value
    assert (exc.group, exc.ranks, exc.method, exc.phase) == ("Blocking", [0, 1], "block", "generate_rollouts")
    assert str(exc) == "worker Blocking ranks 0, 1 in block: no answer within 0.5 s (phase generate_rollouts)"
    assert group.hung == {0, 1}
    t0 = time.monotonic()
    with pytest.raises(WorkerTimeout):  # hung ranks are busy with the earlier call: no second wait
        group.quick()
    assert time.monotonic() - t0 < 0.2
    group.shutdown()
    assert all(w.aborted for w in workers)


def test_only_the_ranks_still_running_are_named_and_hung() -> None:
    group = WorkerGroup(Blocking, 2, timeout_s=0.5)
    timer = StepTimer()
    with pytest.raises(WorkerTimeout) as caught, timer("actor_update"):
        group.block_rank0(60.0)
    assert caught.value.ranks == [0] and caught.value.phase == "actor_update"
    assert group.hung == {0}
    assert group.execute_rank(1, "quick") == 1  # the other rank still answers
    group.shutdown()


def test_single_rank_calls_time_out_and_untimed_calls_stay_inline() -> None:
    group = WorkerGroup(Blocking, 1, timeout_s=0.3)
    with pytest.raises(WorkerTimeout, match=r"worker Blocking rank 0 in block: no answer within 0.3 s"):
        group.block(60.0)
    group.shutdown()
    untimed = WorkerGroup(Blocking, 1)
    assert untimed.thread_id() == threading.get_ident()  # no timeout: runs in the calling thread
    assert untimed.block(0.0) == [0.0]
    untimed.shutdown()


def test_a_constructor_past_the_timeout_is_a_worker_timeout() -> None:
    class SlowStart(Worker):
        def __init__(self) -> None:
            time.sleep(2.0)

    with pytest.raises(WorkerTimeout, match=r"SlowStart rank 0 in __init__: no answer within 0.2 s"):
        WorkerGroup(SlowStart, 1, timeout_s=0.2)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_a_timeout_must_be_positive(bad: float) -> None:
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        WorkerGroup(Blocking, 1, timeout_s=bad)
