"""`vla_infra.dist`: identities without a process group, and over two gloo ranks (the shared two-rank FSDP run of
`tiny_transformer_jobs`) object gathers, sums, and clipping by the norm of the whole sharded gradient."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import tiny_transformer_jobs as helpers

from vla_infra.dist import all_reduce_sum, all_reduce_sums, clip_grad_norm, gather_objects, is_distributed


def test_without_a_process_group_every_collective_is_an_identity() -> None:
    assert not is_distributed()
    value = {"a": torch.ones(2)}
    assert gather_objects(value) == [value] and gather_objects(value)[0] is value
    t = torch.arange(3.0)
    assert all_reduce_sum(t) is t
    assert all_reduce_sums({"b": 1.0, "a": 2.0}) == {"b": 1.0, "a": 2.0}


def test_clip_grad_norm_of_plain_tensors_is_torchs() -> None:
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    x = torch.randn(5, 4)
    for m in (a, b):
        m(x).square().sum().backward()
    a.bias.grad = None  # a parameter without a gradient is skipped, as torch does
    b.bias.grad = None
    norm = clip_grad_norm(list(a.parameters()), 0.1)
    expected = torch.nn.utils.clip_grad_norm_(list(b.parameters()), 0.1)
    assert torch.equal(norm, expected) and float(norm) > 0.1
    assert torch.equal(a.weight.grad, b.weight.grad)


@pytest.mark.slow
def test_two_gloo_ranks_gather_sum_and_clip_like_one_process(two_rank: list[dict[str, Any]]) -> None:
    for rank, res in enumerate(two_rank):
        assert res["is_distributed"], rank
        assert res["gathered"] == [(0, [0]), (1, [1, 1])]
        assert res["summed"].tolist() == [3.0, 4.0]
        assert res["sums"] == {"a": 3.0, "b": 1.0}
        # every rank clips with the norm of the whole gradient, that of one process on the whole batch
        assert res["clip_norm_reference"] > helpers.CLIP_NORM
        assert res["clip_norm"] == pytest.approx(res["clip_norm_reference"], rel=1e-5)
        assert res["clip_grads_max_diff"] < 1e-6
