"""A tiny transformer and the spawn entry points of the offload / FSDP / weight-sync / checkpoint tests.

Module-level functions here are the entry points of processes started with ``spawn`` (the test modules are
imported by path, so the child processes could not import functions defined in them).
"""

from __future__ import annotations

import copy
import functools
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

VOCAB, DIM, HEADS, LAYERS, SEQ = 32, 32, 4, 2, 12


class Block(nn.Module):
    """Pre-norm transformer block: self-attention + MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True, bias=False)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        mask = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device), 1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    """Token LM: embedding, ``layers`` blocks, final norm, head. Input ``[B, T]`` ids, output ``[B, T, V]``."""

    def __init__(self, vocab: int = VOCAB, dim: int = DIM, heads: int = HEADS, layers: int = LAYERS) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(SEQ, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.pos[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def lm_loss(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Next-token cross entropy, mean over the batch."""
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def make_batches(steps: int, batch: int, *, seed: int = 1) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (batch, SEQ), generator=gen) for _ in range(steps)]


def train_reference(
    model: nn.Module,
    batches: list[torch.Tensor],
    *,
    lr: float = 1e-2,
    opt: torch.optim.Optimizer | None = None,
) -> list[float]:
    """Single-process AdamW training on the full global batches; returns the losses."""
    opt = opt if opt is not None else torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for ids in batches:
        loss = lm_loss(model, ids)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def _full_grads(model: nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for name, p in model.named_parameters():
        g = p.grad
        if g is None:
            continue
        out[name] = (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().clone()
    return out


CLIP_NORM = 0.5  # below the gradient norm of the first batch: clipping changes the gradient


def fsdp_job(rank: int, world_size: int, out_dir: str) -> None:
    """Two-rank FSDP2 scenarios; rank r writes its findings to ``out_dir/rank{r}.pt``."""
    from vla_infra.fsdp import FSDPConfig, apply_fsdp2, full_state_dict
    from vla_infra.offload import offload_module, offload_optimizer, reload_module, reload_optimizer

    torch.manual_seed(0)
    init = TinyTransformer()
    global_batch, steps = 8, 4
    batches = make_batches(steps + 1, global_batch)
    local = slice(rank * global_batch // world_size, (rank + 1) * global_batch // world_size)
    res: dict[str, Any] = {}

    # 1) fp32 FSDP training == single-process training on the same global batch.
    ref = copy.deepcopy(init)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    res["ref_losses"] = train_reference(ref, batches[:steps], opt=ref_opt)
    model = apply_fsdp2(copy.deepcopy(init), FSDPConfig(wrap_classes=("Block",)))
    res["num_fsdp_modules"] = sum(type(m).__name__.startswith("FSDP") for m in model.modules())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for ids in batches[:steps]:
        loss = lm_loss(model, ids[local])
        loss.backward()
        opt.step()
        opt.zero_grad()
        g = loss.detach().clone()
        dist.all_reduce(g)
        losses.append(g.item() / world_size)
    res["fsdp_losses"] = losses

    # 2) full state dict gathered from the shards == reference weights after the same steps.
    full = full_state_dict(model, cpu_offload=True)
    if rank == 0:
        ref_sd = ref.state_dict()
        res["full_sd_keys_match"] = sorted(full) == sorted(ref_sd)
        res["full_sd_max_diff"] = max((full[k] - ref_sd[k]).abs().max().item() for k in ref_sd)
    else:
        res["full_sd_len_nonzero_rank"] = len(full)

    # 3) offload params, grads and optimizer state of the sharded model, reload, train on: still == reference.
    loss = lm_loss(model, batches[steps][local])
    loss.backward()
    before = {n: p.detach().to_local().clone() for n, p in model.named_parameters()}
    grads_before = {n: p.grad.to_local().clone() for n, p in model.named_parameters()}
    ptrs = {n: p.to_local().data_ptr() for n, p in model.named_parameters()}
    offload_module(model)
    offload_optimizer(opt)
    # The local shards really moved into new storage (FSDP re-pointed its sharded data at them).
    res["fsdp_offload_moved"] = all(p.to_local().data_ptr() != ptrs[n] for n, p in model.named_parameters())
    reload_module(model)
    reload_optimizer(opt)
    res["fsdp_offload_bit_identical"] = all(
        torch.equal(before[n], p.detach().to_local()) for n, p in model.named_parameters()
    ) and all(torch.equal(grads_before[n], p.grad.to_local()) for n, p in model.named_parameters())
    opt.step()
    opt.zero_grad()
    train_reference(ref, batches[steps : steps + 1], opt=ref_opt)
    after = full_state_dict(model, cpu_offload=False)
    res["after_offload_max_diff"] = max(
        (after[k] - v).abs().max().item() for k, v in ref.state_dict().items()
    )
    # The next forward all-gathers the updated shards (not stale pre-offload storage).
    with torch.no_grad():
        g = lm_loss(model, batches[0][local]).detach()
        dist.all_reduce(g)
        res["after_offload_forward"] = (g.item() / world_size, lm_loss(ref, batches[0]).item())

    # 4) streamed weight sync to a rollout outside the actor's group: a peer group of actor rank 0 and a rollout
    #    member (a thread of rank 0's process here); rank 1 only joins each tensor's gather.
    res["streamed_rollout_equals_actor"] = _streamed_sync(rank, model, after)

    # 5) gradient checkpointing gives the same grads; 6) bf16 params / fp32 reduce trains close to fp32.
    ids = batches[0][local]
    plain = apply_fsdp2(copy.deepcopy(init), FSDPConfig(wrap_classes=("Block",)))
    lm_loss(plain, ids).backward()
    ckpt = apply_fsdp2(copy.deepcopy(init), FSDPConfig(wrap_classes=("Block",), gradient_checkpointing=True))
    lm_loss(ckpt, ids).backward()
    g_plain, g_ckpt = _full_grads(plain), _full_grads(ckpt)
    res["ckpt_grad_keys_match"] = g_plain.keys() == g_ckpt.keys()
    res["ckpt_grad_max_diff"] = max((g_plain[k] - g_ckpt[k]).abs().max().item() for k in g_plain)
    res["ckpt_blocks_patched"] = sum(getattr(m, "_vla_checkpointed", False) for m in ckpt.modules())

    # 5b) vla_infra.dist on this group: object gathers, sums, and clipping by the norm of the whole sharded gradient
    from vla_infra.dist import all_reduce_sum, all_reduce_sums, clip_grad_norm, gather_objects, is_distributed

    whole = copy.deepcopy(init)
    lm_loss(whole, batches[0]).backward()
    res["clip_norm_reference"] = float(torch.nn.utils.clip_grad_norm_(whole.parameters(), CLIP_NORM))
    res["clip_norm"] = float(clip_grad_norm(list(plain.parameters()), CLIP_NORM))
    clipped = _full_grads(plain)
    res["clip_grads_max_diff"] = max(
        (clipped[n] - p.grad).abs().max().item() for n, p in whole.named_parameters()
    )
    res["is_distributed"] = is_distributed()
    res["gathered"] = gather_objects((rank, [rank] * (rank + 1)))
    res["summed"] = all_reduce_sum(torch.tensor([rank + 1.0, 2.0]))
    res["sums"] = all_reduce_sums({"b": 0.5, "a": float(rank + 1)})

    bf16 = apply_fsdp2(
        copy.deepcopy(init), FSDPConfig(wrap_classes=("Block",), param_dtype="bf16", reduce_dtype="fp32")
    )
    opt16 = torch.optim.AdamW(bf16.parameters(), lr=1e-2)
    losses16 = []
    for ids in batches[:steps]:
        loss = lm_loss(bf16, ids[local])
        loss.backward()
        opt16.step()
        opt16.zero_grad()
        g = loss.detach().float().clone()
        dist.all_reduce(g)
        losses16.append(g.item() / world_size)
    res["bf16_losses"] = losses16
    res["bf16_sharded_param_dtype"] = str(next(bf16.parameters()).dtype)

    # 7) CPU offload policy: sharded state on the CPU, training still matches the first steps.
    off = apply_fsdp2(copy.deepcopy(init), FSDPConfig(wrap_classes=("Block",), cpu_offload=True))
    opt_off = torch.optim.AdamW(off.parameters(), lr=1e-2)
    loss = lm_loss(off, batches[0][local])
    loss.backward()
    opt_off.step()
    g = loss.detach().clone()
    dist.all_reduce(g)
    res["cpu_offload_loss0"] = g.item() / world_size
    res["cpu_offload_param_device"] = str(next(off.parameters()).to_local().device)

    # 8) checkpoint of the sharded model + optimizer (DCP shards per rank), loaded into a fresh sharded model:
    #    the next training step is identical.
    from vla_infra.checkpoint import checkpoint_dir, latest_checkpoint, load_checkpoint, save_checkpoint

    root = Path(out_dir) / "ckpt"
    save_checkpoint(checkpoint_dir(root, steps + 1), model, opt, {"step": steps + 1})
    res["ckpt_latest"] = str(latest_checkpoint(root))
    torch.manual_seed(99)
    fresh = apply_fsdp2(TinyTransformer(), FSDPConfig(wrap_classes=("Block",)))
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    loaded = load_checkpoint(checkpoint_dir(root, steps + 1), model=fresh, optimizer=fresh_opt)
    res["ckpt_step"] = loaded.step
    ids = batches[0][local]
    step_losses = []
    for m, o in ((model, opt), (fresh, fresh_opt)):
        loss = lm_loss(m, ids)
        loss.backward()
        o.step()
        o.zero_grad()
        step_losses.append(loss.item())
    res["ckpt_resume_losses"] = step_losses
    res["ckpt_resume_params_equal"] = all(
        torch.equal(a.to_local(), b.to_local()) for a, b in zip(model.parameters(), fresh.parameters())
    )

    torch.save(res, Path(out_dir) / f"rank{rank}.pt")


def _streamed_sync(rank: int, model: nn.Module, full: dict[str, torch.Tensor]) -> bool | None:
    """Rank 0: whether the rollout member received exactly ``full``; rank 1: None."""
    import threading

    from vla_infra.weight_sync import WeightSync
    from vla_infra.workers.worker import find_free_port

    box: list[Any] = [find_free_port() if rank == 0 else 0]
    dist.broadcast_object_list(box, src=0)
    port = box[0]
    assert all(
        hasattr(t, "full_tensor") for t in model.state_dict().values()
    )  # sharded: nothing gathered yet
    sender = WeightSync.sender(model, rank=rank, timeout_s=60)
    if rank != 0:
        sender.join("127.0.0.1", port, 2)
        sender.send(5)
        return None
    rollout = TinyTransformer()
    receiver = WeightSync.receiver(rollout, rank=0, timeout_s=60)
    got: dict[str, Any] = {}

    def rollout_member() -> None:
        receiver.join("127.0.0.1", port, 2)
        got["received"] = receiver.receive(5)

    thread = threading.Thread(target=rollout_member)
    thread.start()
    sender.join("127.0.0.1", port, 2)
    sender.send(5)
    thread.join(timeout=120)
    state = rollout.state_dict()
    return (
        receiver.version == 5
        and got.get("received", {}).get("tensors") == len(full)
        and state.keys() == full.keys()
        and all(torch.equal(state[k], full[k].cpu()) for k in full)
    )


@functools.cache
def two_rank_results() -> dict[str, list[dict[str, Any]]]:
    """Run :func:`fsdp_job` once per test session; results per scenario set and rank."""
    from vla_infra.fsdp import spawn_local_group

    out = Path(tempfile.mkdtemp(prefix="vla_infra_b_"))
    try:
        spawn_local_group(fsdp_job, world_size=2, args=(str(out),))
        return {"fsdp": [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(2)]}
    finally:
        shutil.rmtree(out, ignore_errors=True)


# Child process of the kill-mid-save test: saves step 1, then a large step 2 with slowed fsyncs
# (so the parent's SIGKILL lands while step 2 is being written). Arguments: root directory.
SLOW_SAVE_CHILD = """
import os, sys, time
import torch
from vla_infra.checkpoint import checkpoint_dir, save_checkpoint
root = sys.argv[1]
torch.manual_seed(0)
small = {"w": torch.randn(64, 64), "b": torch.randn(64)}
save_checkpoint(checkpoint_dir(root, 1), small, trainer_state={"step": 1})
print("saved1", flush=True)
real_fsync = os.fsync
def slow_fsync(fd):
    time.sleep(0.5)
    real_fsync(fd)
os.fsync = slow_fsync
big = {f"layer{i}": torch.randn(1024, 1024) for i in range(16)}  # 64 MiB
save_checkpoint(checkpoint_dir(root, 2), big, trainer_state={"step": 2})
print("saved2", flush=True)
"""
