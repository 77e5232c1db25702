"""Atomic checkpoints: round trip, exact resume with RNG states, and a save killed mid-way."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import tiny_transformer_jobs as helpers

from vla_infra.checkpoint import (
    COMPLETE_MARKER,
    checkpoint_dir,
    is_complete,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int) -> list[float]:
    """Training whose data and loss scale draw from torch, numpy and python RNGs."""
    losses = []
    for _ in range(steps):
        ids = torch.randint(0, helpers.VOCAB, (4, helpers.SEQ))
        scale = 1.0 + random.random() + float(np.random.rand())
        loss = helpers.lm_loss(model, ids) * scale
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def test_save_load_round_trip_layout_and_latest(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = helpers.TinyTransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _train(model, opt, 1)
    path = save_checkpoint(checkpoint_dir(tmp_path, 7), model, opt, {"step": 7, "epoch": 2, "tag": "x"})
    assert path == tmp_path / "global_step_7" and is_complete(path)
    assert {p.name for p in path.iterdir()} == {
        "model.safetensors",
        "state",
        "manifest.json",
        COMPLETE_MARKER,
    }
    assert not list(tmp_path.glob("*.tmp-*"))
    save_checkpoint(checkpoint_dir(tmp_path, 3), model, trainer_state={"step": 3})
    assert latest_checkpoint(tmp_path) == path

    torch.manual_seed(5)
    fresh = helpers.TinyTransformer()
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    loaded = load_checkpoint(path, model=fresh, optimizer=fresh_opt)
    assert loaded.step == 7 and loaded.trainer_state == {"step": 7, "epoch": 2, "tag": "x"}
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(a, b), name
    for p, q in zip(model.parameters(), fresh.parameters()):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opt.state[p][key], fresh_opt.state[q][key]), key
    weights_only = load_checkpoint(path, restore_rng=False)
    assert weights_only.model_state is not None and set(weights_only.model_state) == set(model.state_dict())


def test_exact_resume_restores_rng_states(tmp_path: Path) -> None:
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    model = helpers.TinyTransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _train(model, opt, 2)
    ckpt = save_checkpoint(checkpoint_dir(tmp_path, 2), model, opt, {"step": 2})
    expected = _train(model, opt, 3)

    for restore, should_match in ((True, True), (False, False)):
        torch.manual_seed(123)
        random.seed(123)
        np.random.seed(123)
        fresh = helpers.TinyTransformer()
        fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
        load_checkpoint(ckpt, model=fresh, optimizer=fresh_opt, restore_rng=restore)
        assert (_train(fresh, fresh_opt, 3) == expected) is should_match
        if should_match:
            for a, b in zip(model.parameters(), fresh.parameters()):
                assert torch.equal(a, b)


def test_bad_input_and_overwrite(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="model_state"):
        save_checkpoint(tmp_path / "a", model.state_dict(), opt)
    with pytest.raises(TypeError, match=r"model_state\['x'\]"):
        save_checkpoint(tmp_path / "a", {"x": 3})  # type: ignore[dict-item]
    path = save_checkpoint(tmp_path / "a", {"w": torch.zeros(2)})
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_checkpoint(path, {"w": torch.ones(2)})
    save_checkpoint(path, {"w": torch.ones(2)}, overwrite=True)
    assert torch.equal(load_checkpoint(path).model_state["w"], torch.ones(2))  # type: ignore[index]
    assert not [p for p in tmp_path.iterdir() if p.name != "a"]
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        load_checkpoint(tmp_path / "missing")
    assert latest_checkpoint(tmp_path / "missing") is None


def test_tied_weights_are_saved(tmp_path: Path) -> None:
    model = helpers.TinyTransformer(vocab=helpers.DIM)
    model.head.weight = model.embed.weight  # tied: shared storage
    path = save_checkpoint(tmp_path / "tied", model)
    loaded = load_checkpoint(path).model_state
    assert loaded is not None and torch.equal(loaded["head.weight"], loaded["embed.weight"])


class _ViewsOfOneBuffer(torch.nn.Module):
    """A fused buffer and parameters that are views into it at non-zero offsets (a fused qkv and its k, v)."""

    def __init__(self) -> None:
        super().__init__()
        flat = torch.arange(24.0)
        self.k = torch.nn.Parameter(flat[8:16].view(2, 4))
        self.v = torch.nn.Parameter(flat[16:24])
        self.register_buffer("qkv", flat)
        self.register_buffer("k_t", flat[8:16].view(2, 4).t())  # non-contiguous view


def test_views_of_one_storage_at_different_offsets_are_saved(tmp_path: Path) -> None:
    model = _ViewsOfOneBuffer()
    path = save_checkpoint(tmp_path / "views", model)
    loaded = load_checkpoint(path).model_state
    assert loaded is not None and loaded.keys() == model.state_dict().keys()
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded[name], tensor), name
    fresh = _ViewsOfOneBuffer()
    with torch.no_grad():
        fresh.qkv.zero_()  # zeroes k and v too (views)
    load_checkpoint(path, model=fresh)
    assert (
        torch.equal(fresh.k, model.k) and torch.equal(fresh.v, model.v) and torch.equal(fresh.qkv, model.qkv)
    )


class _WithLateHead(torch.nn.Module):
    """A trunk always used and an extra head used only when asked (no gradient, so no AdamW state, before)."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = torch.nn.Linear(4, 3)
        self.extra = torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor, *, use_extra: bool) -> torch.Tensor:
        h = self.trunk(x)
        return self.extra(h).sum() + h.sum() if use_extra else h.pow(2).sum()


def _adamw_step(
    model: _WithLateHead, opt: torch.optim.Optimizer, x: torch.Tensor, *, use_extra: bool
) -> None:
    model(x, use_extra=use_extra).backward()
    opt.step()
    opt.zero_grad()


def test_optimizer_state_saved_without_some_params_resumes_exactly(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _WithLateHead()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    _adamw_step(model, opt, torch.randn(5, 4), use_extra=False)
    assert model.extra.weight not in opt.state  # the partial state this test is about
    path = save_checkpoint(tmp_path / "partial", model, opt, {"step": 1})

    torch.manual_seed(1)
    fresh = _WithLateHead()
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2, weight_decay=0.1)
    # before the fix this raised "Missing key in checkpoint state_dict: optimizer.state.extra.weight.step"
    load_checkpoint(path, model=fresh, optimizer=fresh_opt)
    pairs = list(zip(model.parameters(), fresh.parameters(), strict=True))
    for p, q in pairs:
        assert torch.equal(p, q)
        assert (p in opt.state) == (q in fresh_opt.state)  # params without state stay without state
        for key, value in opt.state.get(p, {}).items():
            assert torch.equal(value, fresh_opt.state[q][key]), key
    assert len(fresh_opt.state) == 2 and fresh.extra.weight not in fresh_opt.state

    x = torch.randn(5, 4)  # the next step also reaches the extra head: its first AdamW state in both
    _adamw_step(model, opt, x, use_extra=True)
    _adamw_step(fresh, fresh_opt, x, use_extra=True)
    for p, q in pairs:
        assert torch.equal(p, q)
        assert opt.state[p].keys() == fresh_opt.state[q].keys()
        for key, value in opt.state[p].items():
            assert torch.equal(value, fresh_opt.state[q][key]), key


@pytest.mark.slow
def test_kill_mid_save_leaves_previous_checkpoint_loadable(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen(
        [sys.executable, "-c", helpers.SLOW_SAVE_CHILD, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "saved1"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            partial = [p for p in tmp_path.glob("global_step_2.tmp-*") if (p / "model.safetensors").exists()]
            if partial and (partial[0] / "model.safetensors").stat().st_size > 0:
                break
            time.sleep(0.01)
        else:
            pytest.fail("the child never started writing step 2")
        time.sleep(0.3)  # inside the (slowed) fsync phase
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        proc.kill()

    assert not (tmp_path / "global_step_2").exists()  # killed before the rename
    leftovers = list(tmp_path.glob("global_step_2.tmp-*"))
    assert len(leftovers) == 1 and not is_complete(leftovers[0])
    previous = latest_checkpoint(tmp_path)
    assert previous == tmp_path / "global_step_1"
    loaded = load_checkpoint(previous)
    torch.manual_seed(0)
    assert torch.equal(loaded.model_state["w"], torch.randn(64, 64))  # type: ignore[index]
    assert loaded.trainer_state == {"step": 1}
    assert latest_checkpoint(tmp_path) == previous and leftovers[0].exists()
