"""Worker groups on the local backend: dispatch/gather modes, async overlap, call order, errors."""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest
import torch

from vla_infra import LocalBackend, Worker, WorkerGroup, register, resolve_placement
from vla_infra.workers import concat_values, make_backend, split_value
from vla_infra.workers.dispatch import dispatch_args


class Shard(Worker):
    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset
        self.seen: list[int] = []
        self.device_at_init = self.device  # info is available inside __init__

    @register("split")
    def affine(self, x, *, scale):
        return x * scale + self.offset + 100 * self.rank

    @register("split")
    def batch(self, data):
        return {"ids": data["ids"], "n": [len(data["ids"])], "obs": data["obs"] + self.rank}

    @register("all_to_all")
    def take(self, item):
        return (self.rank, item)

    @register("rank_zero")
    def lead(self):
        return f"rank {self.rank} of {self.world_size}"

    @register("one_to_all", collect="concat")
    def own_rows(self, n):
        return np.full((n, 2), self.rank)

    @register(
        "split", collect=lambda outs: np.concatenate([np.pad(o, (len(outs) - len(o), 0)) for o in outs])
    )
    def ragged(self, x):
        """Rows of rank r widened by r: a join only the method's owner knows (left-pad each to the widest)."""
        return np.ones(len(x) + self.rank)

    @register("split")
    def rows_plus_rank(self, rows):
        return dataclasses.replace(rows, x=rows.x + 100 * self.rank)

    def whoami(self):
        return self.info

    def record(self, i):
        self.seen.append(i)
        return list(self.seen)

    def sleep(self, seconds):
        time.sleep(seconds)
        return threading.get_ident()

    def fail(self):
        raise RuntimeError(f"boom from rank {self.rank}")


@pytest.fixture()
def group():
    g = WorkerGroup(Shard, 3, kwargs={"offset": 0.5})
    yield g
    g.shutdown()


def test_split_concat_tensor_keeps_order(group):
    x = torch.arange(8, dtype=torch.float32)
    out = group.affine(x, scale=2.0)
    # sizes 3, 3, 2: rank r adds 100 * r
    expected = x * 2.0 + 0.5 + torch.tensor([0, 0, 0, 100, 100, 100, 200, 200], dtype=torch.float32)
    assert torch.equal(out, expected)


def test_split_dict_of_arrays_and_lists(group):
    data = {"ids": list(range(6)), "obs": np.arange(12).reshape(6, 2)}
    out = group.batch(data)
    assert out["ids"] == list(range(6))
    assert out["n"] == [2, 2, 2]
    np.testing.assert_array_equal(out["obs"], np.arange(12).reshape(6, 2) + np.repeat([0, 1, 2], 2)[:, None])


def test_all_to_all_rank_zero_one_to_all(group):
    assert group.take(["a", "b", "c"]) == [(0, "a"), (1, "b"), (2, "c")]
    with pytest.raises(ValueError, match="one entry per rank"):
        group.take(["a", "b"])
    assert group.lead() == "rank 0 of 3"
    assert [info.rank for info in group.whoami()] == [0, 1, 2]
    assert group.own_rows(2).tolist() == [[0, 0], [0, 0], [1, 1], [1, 1], [2, 2], [2, 2]]


def test_a_method_joins_its_outputs_with_its_own_collect_function(group):
    out = group.ragged(np.zeros(3))  # one row per rank, widened by the rank: 1, 2, 3 ones, padded to 3
    assert out.tolist() == [0, 0, 1, 0, 1, 1, 1, 1, 1]


def test_worker_info_and_device():
    pl = resolve_placement({"env": "0:0-1"}, num_nodes=1, num_gpus_per_node=0)
    g = WorkerGroup(Shard, pl["env"])
    infos = g.whoami()
    assert g.name == "env"
    assert [(i.group, i.rank, i.world_size, i.device, i.backend) for i in infos] == [
        ("env", 0, 2, "cpu", "local"),
        ("env", 1, 2, "cpu", "local"),
    ]
    assert infos[0].master_addr == "127.0.0.1" and infos[0].master_port == infos[1].master_port > 0
    assert g.handles[0].worker.device_at_init == torch.device("cpu")
    with pytest.raises(RuntimeError, match="Ray backend"):
        g.execute_rank(0, "init_process_group")
    g.shutdown()


def test_submit_overlaps_groups_and_keeps_call_order():
    a = WorkerGroup(Shard, 1, name="a")
    b = WorkerGroup(Shard, 2, name="b")
    start = time.perf_counter()
    futures = [a.sleep.submit(0.3), b.sleep.submit(0.3)]
    idents = [f.result() for f in futures]
    elapsed = time.perf_counter() - start
    assert elapsed < 0.75, f"groups did not overlap: {elapsed:.2f} s (sequential would be 0.9 s)"
    assert len({idents[0][0], *idents[1]}) == 3  # each worker runs on its own thread
    # calls on one worker run in submission order, sync calls included
    pending = [a.record.submit(i) for i in range(5)]
    assert a.record(5) == [[0, 1, 2, 3, 4, 5]]
    assert [f.result() for f in pending][-1] == [[0, 1, 2, 3, 4]]
    a.shutdown()
    b.shutdown()


def test_errors_propagate_with_rank(group):
    with pytest.raises(RuntimeError, match="boom from rank 0"):
        group.fail()
    with pytest.raises(RuntimeError, match="boom"):
        group.fail.submit().result()
    with pytest.raises(AttributeError, match="no public method"):
        group.nope  # noqa: B018


def test_split_and_concat_helpers():
    assert [len(c) for c in split_value(list(range(7)), 3)] == [3, 2, 2]
    assert split_value(5, 2) == [5, 5]
    with pytest.raises(ValueError, match="different leading sizes"):
        split_value({"a": [1, 2], "b": [1, 2, 3]}, 2)
    assert concat_values([None, None]) is None
    assert concat_values([(1,), (2, 3)]) == (1, 2, 3)
    # split arguments of different batch sizes would hand each rank mismatched rows
    with pytest.raises(ValueError, match=r"different leading sizes \{'0': 4, 'y': 3\}"):
        dispatch_args("split", 2, (np.zeros(4),), {"y": [1, 2, 3], "scale": 2.0})
    ((_, args, kwargs),) = dispatch_args("split", 1, (np.zeros(3),), {"y": [1, 2, 3], "scale": 2.0})
    assert len(args[0]) == 3 and kwargs == {"y": [1, 2, 3], "scale": 2.0}


@dataclasses.dataclass
class Rows:
    """A typed batch: rows [N, ...], an optional field, and a setting that every chunk keeps."""

    x: torch.Tensor
    ids: list[int]
    extra: np.ndarray | None = None
    tag: str = "rows"


def test_dataclasses_split_and_join_field_by_field(group):
    rows = Rows(torch.arange(8.0).reshape(4, 2), [0, 1, 2, 3], tag="t")
    parts = split_value(rows, 3)
    assert [p.ids for p in parts] == [[0, 1], [2], [3]] and {p.tag for p in parts} == {"t"}
    joined = concat_values(parts)
    assert isinstance(joined, Rows) and torch.equal(joined.x, rows.x) and joined.ids == rows.ids
    assert joined.extra is None
    out = group.rows_plus_rank(rows)  # through the group: split to the ranks, each adds its rank, joined
    assert isinstance(out, Rows) and out.x[:, 0].tolist() == [0, 2, 104, 206]


def test_bad_arguments():
    with pytest.raises(TypeError, match=r"subclass of vla_infra\.Worker"):
        WorkerGroup(object, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="register"):
        register("scatter")
    with pytest.raises(ValueError, match="num_nodes"):
        make_backend("local", num_nodes=2)
    with pytest.raises(ValueError, match="unknown backend"):
        make_backend("slurm")
    two_nodes = resolve_placement({"env": "0-1"}, num_nodes=2, num_gpus_per_node=0)
    with pytest.raises(ValueError, match="RayBackend"):
        WorkerGroup(Shard, two_nodes["env"], backend=LocalBackend())


@dataclasses.dataclass
class Groups:
    """Rows in groups of `split_unit` that must stay on one rank."""

    x: torch.Tensor
    split_unit: int = 1


def test_dp_split_cuts_only_between_whole_units():
    from vla_infra import unit_bounds

    assert unit_bounds(12, 2, unit=4) == [(0, 8), (8, 12)]  # 3 groups of 4: 2 and 1 group
    calls = dispatch_args("dp_split", 2, (Groups(torch.arange(12), split_unit=4),), {})
    assert [c[1][0].x.tolist() for c in calls] == [list(range(8)), list(range(8, 12))]
    assert all(c[1][0].split_unit == 4 for c in calls)
    # a plain split would cut a group in two (rows 0-5 and 6-11): dp_split never does
    assert [len(c[1][0].x) for c in dispatch_args("split", 2, (Groups(torch.arange(12), 4),), {})] == [6, 6]
    with pytest.raises(ValueError, match=r"1 unit\(s\) of 4 rows.*must stay on one rank"):
        dispatch_args("dp_split", 2, (Groups(torch.arange(4), split_unit=4),), {})
    with pytest.raises(ValueError, match="not a whole number of units of 4 rows"):
        dispatch_args("dp_split", 2, (Groups(torch.arange(10), split_unit=4),), {})
