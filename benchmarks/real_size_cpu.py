"""Each guide model at its real size (random weights, bf16) through the trainer's own code, with its memory bound.

Families and the guide settings they are built with (apps/train_embodied/configs, from the reference guides):

- ``openvla``: OpenVLA 7B as ``maniskill_ppo_openvla`` (7 action dims, one token each, value head, LoRA r=32);
- ``openvla_oft``: OpenVLA-OFT 7B as ``robotwin_place_empty_cup_grpo_openvlaoft`` (official layout, 14-d proprio
  projector token, 25 x 14 action slots, one camera, FiLM as the guide sets it (off; ``--film`` turns it on),
  no value head, LoRA r=32) with OFT's L1 regression head, so its decision is the greedy L1 action;
- ``pi0`` / ``pi05``: PaliGemma 3B + 300M expert as ``metaworld_50_ppo_openpi`` / ``..._pi05`` (one camera, 4-d
  actions, C=5, K=5 ``flow_sde`` steps, value head (pi0.5: after the VLM), ``train_expert_only``), with LoRA
  r=32 on the expert.

Each family runs in its own subprocess (so its peak resident memory is its own: ``os.wait4``'s rusage), which:

1. builds the policy with ``vla_models.build_policy`` (parameters created directly in bf16) and switches the
   family's FSDP blocks to gradient checkpointing (``vla_infra.enable_gradient_checkpointing``);
2. makes one rollout decision at batch 1 with ``policy.predict`` as the rollout worker calls it (no grad, one
   generator per row);
3. takes one update step on that decision through ``train_embodied.update.ppo_update`` with the optimizer of
   ``train_embodied.policy_io.build_optimizer`` (the guide's loss: PPO actor-critic, or GRPO's actor loss);
4. makes a greedy decision, saves with ``save_pretrained`` (LoRA merged into the bf16 weights), merges LoRA into
   the policy in place the same way and makes the greedy decision again (what the folder must reproduce), frees the
   policy and its optimizer, reloads with ``load_policy`` and decides again: the reloaded decision must match the
   merged one (its difference from the unmerged one, the bf16 export's rounding, is printed).

On the CPU the policy is built as the trainer builds it (``train_embodied.policy_io.build_policy_for_run``): where
the CPU has no native bf16 GEMM, its Linear layers compute their products in float32 from the bf16 weights
(``vla_models.cpu_float32_products``).

It prints, per family, the time of each phase, the peak resident memory of each phase and of the whole process,
and an analytic bound: the process before building (interpreter and libraries) + parameters and buffers + 3x the
parameters the RL optimizer trains (``vla_models.rl_parameters``: gradients and AdamW's two moments) + activations
(the checkpointed blocks' saved inputs and a KV cache, measured from the shapes the blocks see, + one block
recomputed in float32 + its attention scores) + the largest Linear weight in float32 (the transient copy of a
float32 product). The ratio peak / bound must be <= 1.2. It exits non-zero on any failure: a shape or dtype that is
not the contract's, non-finite outputs, an update that moves no trainable weight or moves a frozen one, a reloaded
decision that disagrees, a ratio above 1.2, or memory running out (the process aborts itself, exit 3, when its
resident memory passes 95% of what the machine had available when it started or the machine's available memory
falls under 1 GiB, so it never takes down a shared machine).

Before each family the parent waits (polling every 60 s, up to ``--wait-min`` minutes) until the machine has the
family's memory available (``--layers`` runs need less) and checks that the output folder's disk has room for
the save.

    python benchmarks/real_size_cpu.py [--families openvla openvla_oft pi0 pi05] [--device cpu|cuda]
        [--layers N] [--threads 2] [--out /tmp/real_size_cpu] [--wait-min 20] [--film]

``--layers N``: every width, vocabulary and image size real, only N decoder layers (vision towers: max(N, 2)),
a quick check of the same code path.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

GIB = 1024**3
FAMILIES = ("openvla", "openvla_oft", "pi0", "pi05")
# memory the machine must have available before a real-size family starts (GB, the guide's bf16 weights + margin)
REAL_SIZE_AVAILABLE_GB = {"openvla": 19.0, "openvla_oft": 19.0, "pi0": 12.0, "pi05": 12.0}
# parameters at real size (billions), for the wait and the disk check of a reduced --layers run
REAL_SIZE_PARAMS_B = {"openvla": 7.6, "openvla_oft": 7.6, "pi0": 3.4, "pi05": 3.4}
RATIO_LIMIT = 1.2
#: the reloaded folder's greedy actions against the merged policy's, as a share of the largest action (the same
#: bf16 weights through the same code: any difference beyond float noise is a save or load fault)
RELOAD_TOLERANCE = 1e-3
MIN_SYSTEM_AVAILABLE = 1 * GIB


# ---------------------------------------------------------------------------------------------------------- child
class MemoryWatch:
    """Samples this process's resident memory every 0.2 s: the peak of each phase, and a guard that aborts the
    process (exit 3) when it passes `limit` bytes or the machine's available memory falls under 1 GiB."""

    def __init__(self, limit: float) -> None:
        import psutil

        self.proc = psutil.Process()
        self.vm = psutil.virtual_memory
        self.limit = limit
        self.phase = "start"
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def rss(self) -> int:
        return self.proc.memory_info().rss

    def enter(self, phase: str) -> None:
        self.sample()
        self.phase = phase

    def sample(self) -> None:
        rss = self.rss()
        self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), rss)
        available = self.vm().available
        if rss > self.limit or available < MIN_SYSTEM_AVAILABLE:
            why = (
                f"resident memory {rss / GIB:.2f} GiB passed the abort limit {self.limit / GIB:.2f} GiB"
                if rss > self.limit
                else f"the machine has only {available / GIB:.2f} GiB available"
            )
            print(f"MEMORY FAILURE in phase {self.phase}: {why}", flush=True)
            os._exit(3)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


class BenchFailure(RuntimeError):
    """A shape, dtype, numeric or agreement check failed."""


def check(ok: bool, msg: str) -> None:
    if not ok:
        raise BenchFailure(msg)


def family_config(name: str, layers: int | None, film: bool) -> tuple[Any, dict[str, Any]]:
    """The typed vla_models config of `name` as its guide configures it, and what the run needs to know about
    it (decision mode, observation, loss)."""
    from vla_models import OpenPiConfig, OpenVLAConfig, OpenVLAOFTConfig

    common = dict(tokenizer="tiny", precision="bf16", is_lora=True, lora_rank=32)
    if name == "openvla":
        cfg = OpenVLAConfig.openvla_7b(action_dim=7, num_action_chunks=1, add_value_head=True, **common)
        run = dict(mode="sample", state_dim=None, loss_type="actor_critic", lr=1e-4, value_lr=3e-3)
    elif name == "openvla_oft":
        cfg = OpenVLAOFTConfig.openvla_7b(
            implement_version="official",
            action_dim=14,
            num_action_chunks=25,
            use_proprio=True,
            proprio_dim=14,
            num_images_in_input=1,
            use_film=film,
            action_head="l1",
            add_value_head=False,
            **common,
        )
        run = dict(mode="greedy", state_dim=14, loss_type="actor", lr=1e-4, value_lr=1e-4)
    elif name in ("pi0", "pi05"):
        pi05 = name == "pi05"
        cfg = OpenPiConfig.pi0_base(
            config_name="pi05_metaworld" if pi05 else "pi0_metaworld",
            action_dim=4,
            num_action_chunks=5,
            num_steps=5,
            num_images_in_input=1,
            add_value_head=True,
            detach_critic_input=True,
            noise_method="flow_sde",
            noise_level=0.5,
            train_expert_only=True,
            **({"value_after_vlm": True} if pi05 else {}),
            **common,
        )
        run = dict(
            mode="sample",
            state_dim=None if pi05 else 4,
            loss_type="actor_critic",
            lr=5e-6 if pi05 else 1e-5,
            value_lr=1e-4,
        )
    else:
        raise ValueError(f"family {name!r} is not one of {FAMILIES}")
    if layers is not None:
        cfg = with_layers(cfg, layers)
    return cfg, run


def with_layers(cfg: Any, n: int) -> Any:
    """`cfg` with `n` decoder layers (vision towers: max(n, 2), Prismatic reads the 2nd-to-last block)."""
    if n < 1:
        raise ValueError(f"--layers must be >= 1, got {n}")
    if hasattr(cfg, "backbone"):
        b = cfg.backbone
        towers = tuple(dataclasses.replace(t, num_layers=max(n, 2)) for t in b.vision_towers)
        text = dataclasses.replace(b.text, num_layers=n)
        return cfg.replace(backbone=dataclasses.replace(b, vision_towers=towers, text=text))
    return cfg.replace(sizes=dataclasses.replace(cfg.sizes, depth=n, vision_depth=max(n, 2)))


def observation(cfg: Any, state_dim: int | None) -> dict[str, Any]:
    """One observation as the env workers deliver it after `select_proprio` (uint8 224 px camera)."""
    import numpy as np

    rng = np.random.default_rng(0)
    size = cfg.backbone.image_size if hasattr(cfg, "backbone") else cfg.sizes.image_size
    return {
        "images": rng.integers(0, 256, (1, size, size, 3), dtype=np.uint8),
        "wrist_images": None,
        "states": None if state_dim is None else rng.uniform(-1, 1, (1, state_dim)).astype(np.float32),
        "task_descriptions": ["put the cup on the coaster"],
    }


def tensor_bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class BlockShapes:
    """Forward hooks on the checkpointed blocks: the largest input each block sees (tokens x width), from
    which the activation bound is computed."""

    def __init__(self, blocks: list[Any]) -> None:
        import torch

        self.inputs: dict[int, tuple[int, int, int]] = {}  # id -> (bytes, tokens, width)
        self.linear_out: dict[int, int] = {}
        self.handles = []
        for block in blocks:
            self.linear_out[id(block)] = sum(
                m.out_features for m in block.modules() if isinstance(m, torch.nn.Linear)
            )
            self.handles.append(block.register_forward_pre_hook(self._hook, with_kwargs=True))

    def _hook(self, module: Any, args: tuple, kwargs: dict) -> None:
        import torch

        x = args[0] if args else kwargs.get("hidden_states")
        if not isinstance(x, torch.Tensor) or x.ndim < 2:
            return
        tokens = x.numel() // x.shape[-1]
        seen = self.inputs.get(id(module), (0, 0, 0))
        if x.numel() * x.element_size() > seen[0]:
            self.inputs[id(module)] = (x.numel() * x.element_size(), tokens, x.shape[-1])

    def activation_bound(self) -> int:
        """Saved block inputs (x3: the input, the KV cache's keys and values) + the largest block recomputed with
        every Linear's output alive in float32 (x2: its gradient) + its attention scores and their gradient in
        float32 at width/64 heads."""
        saved = 3 * sum(b for b, _, _ in self.inputs.values())
        work = max(
            (
                2 * t * self.linear_out[i] * 4 + 2 * (w // 64) * t * t * 4
                for i, (_, t, w) in self.inputs.items()
            ),
            default=0,
        )
        return saved + work

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def run_child(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(args.threads)
    name = args.child
    result: dict[str, Any] = {"family": name, "layers": args.layers, "device": args.device, "ok": False}
    watch = MemoryWatch(limit=args.abort_bytes)
    base = watch.rss()
    times: dict[str, float] = {}
    out_file = Path(args.result)

    def phase(label: str) -> None:
        watch.enter(label)
        times[label] = time.perf_counter()

    def done(label: str) -> float:
        times[label] = time.perf_counter() - times[label]
        print(
            f"  {label}: {times[label]:.1f} s, peak RSS so far {watch.peaks.get(label, 0) / GIB:.2f} GiB",
            flush=True,
        )
        return times[label]

    try:
        from train_embodied.batches import SampleBatch
        from train_embodied.config.sections import AlgorithmSection, OptimSection
        from train_embodied.policy_io import build_optimizer
        from train_embodied.update import ppo_update
        from vla_infra import enable_gradient_checkpointing
        from vla_models import build_policy, cpu_float32_products, get_family, load_policy, rl_parameters
        from vla_models.lora import merge_lora_

        cfg, run = family_config(name, args.layers, args.film)
        dev = torch.device(args.device)
        base = watch.rss()  # after the imports: the process the model is added to

        phase("build")
        if dev.type == "cuda":
            torch.set_default_device(dev)  # parameters are created on the GPU: no host copy of the weights
        try:
            policy = build_policy(cfg)
        finally:
            torch.set_default_device(None)  # no device mode left intercepting every later torch call
        if dev.type == "cpu":
            # as the trainer's build_policy_for_run: float32 products where the CPU lacks native bf16 GEMM
            result["float32_product_layers"] = cpu_float32_products(policy)
        wrap = set(get_family(type(policy.config).family).fsdp_wrap_classes)
        blocks = [m for m in policy.modules() if type(m).__name__ in wrap]
        n_ckpt = enable_gradient_checkpointing(policy, wrap_classes=tuple(wrap))
        check(
            n_ckpt > 0, f"{name}: no block switched to gradient checkpointing (wrap classes {sorted(wrap)})"
        )
        params = list(policy.parameters())
        weights = tensor_bytes(params) + tensor_bytes(policy.buffers())
        trainable = [p for _, p in rl_parameters(policy)]  # what build_optimizer gives AdamW
        bf16_share = tensor_bytes(p for p in params if p.dtype == torch.bfloat16) / tensor_bytes(params)
        # pi0.5 keeps its adaptive norms' projections in float32 as openpi does: 6.9% of its bytes at real size
        check(bf16_share >= 0.9, f"{name}: only {bf16_share:.1%} of the parameter bytes are bf16")
        lora = [p for n, p in policy.named_parameters() if "lora_" in n]
        check(len(lora) > 0 and all(p.requires_grad for p in lora), f"{name}: no trainable LoRA adapters")
        result.update(
            params_b=sum(p.numel() for p in params) / 1e9,
            trainable_m=sum(p.numel() for p in trainable) / 1e6,
            weights_gib=weights / GIB,
            checkpointed_blocks=n_ckpt,
        )
        print(
            f"  built: {result['params_b']:.2f}B parameters ({bf16_share:.1%} of bytes bf16), "
            f"{result['trainable_m']:.1f}M trainable, {n_ckpt} checkpointed blocks",
            flush=True,
        )
        done("build")
        shapes = BlockShapes(blocks)

        obs = observation(cfg, run["state_dim"])
        c, a = policy.config.num_action_chunks, policy.config.action_dim

        def decide(p: Any, mode: str, seed: int) -> Any:
            with torch.no_grad():
                out = p.predict(
                    obs, mode=mode, temperature=1.0, generator=[torch.Generator(device=dev).manual_seed(seed)]
                )
            check(
                tuple(out.actions.shape) == (1, c, a) and out.actions.dtype == torch.float32,
                f"{name}: actions {tuple(out.actions.shape)} {out.actions.dtype}, the contract is (1, {c}, {a}) "
                "float32",
            )
            check(
                out.logprobs.shape == out.actions.shape and out.logprobs.dtype == torch.float32,
                f"{name}: logprobs {tuple(out.logprobs.shape)} {out.logprobs.dtype}",
            )
            if policy_has_values:
                check(
                    out.values is not None and tuple(out.values.shape) == (1,),
                    f"{name}: values {None if out.values is None else tuple(out.values.shape)}, want (1,)",
                )
            for key in ("actions", "logprobs", "values"):
                t = getattr(out, key)
                check(t is None or bool(torch.isfinite(t).all()), f"{name}: non-finite {key}")
            return out

        policy_has_values = bool(getattr(policy.config, "add_value_head", False))
        phase("decision")
        out = decide(policy, run["mode"], seed=0)
        done("decision")
        shapes.remove()
        activations = shapes.activation_bound()
        train_state = 3 * tensor_bytes(
            trainable
        )  # gradients and AdamW's two moments, in the parameters' dtype
        # float32 products (CPU without native bf16 GEMM): one weight at a time is recast, the largest bounds it
        largest = max(
            (m.weight.numel() for m in policy.modules() if isinstance(m, torch.nn.Linear)), default=0
        )
        products = 4 * largest if result.get("float32_product_layers") else 0
        bound = base + weights + train_state + activations + products

        phase("update")
        critic = run["loss_type"] == "actor_critic"
        values = out.values.float().cpu() if critic else None
        batch = SampleBatch(
            forward_inputs={k: v.cpu() for k, v in out.forward_inputs.items()},
            old_logprobs=out.logprobs.float().cpu(),
            advantages=torch.ones(1),
            mask=torch.ones(1, dtype=torch.bool),
            old_values=values,
            returns=None if values is None else values + 1.0,
        )
        optim = OptimSection(lr=run["lr"], value_lr=run["value_lr"])
        algo = AlgorithmSection(loss_type=run["loss_type"], update_epoch=1)
        optimizer = build_optimizer(policy, optim)
        lora_before = [p.detach().clone() for p in lora[:4]]
        frozen = next(p for p in params if not p.requires_grad)
        frozen_before = frozen.detach().float().sum().item()
        policy.eval()  # as the actor worker trains: no dropout, the ratio starts at 1
        metrics, steps = ppo_update(
            policy,
            optimizer,
            batch,
            algo,
            optim,
            micro_batch_size=1,
            global_batch_size=1,
            generator=torch.Generator().manual_seed(0),
        )
        check(steps == 1, f"{name}: the update took {steps} optimizer steps, want 1")
        for k, v in metrics.items():
            check(math.isfinite(v), f"{name}: update metric {k} = {v}")
        kl = metrics.get("train/actor/first_minibatch_approx_kl", 0.0)
        check(
            abs(kl) <= 1e-3,
            f"{name}: evaluate does not recompute the decision's log-probs (approx_kl {kl:.3g})",
        )
        check(metrics.get("train/actor/grad_norm", 0.0) > 0, f"{name}: zero gradient norm")
        moved = any(not torch.equal(b, p.detach()) for b, p in zip(lora_before, lora[: len(lora_before)]))
        check(moved, f"{name}: the update step moved no LoRA weight")
        check(
            frozen.detach().float().sum().item() == frozen_before, f"{name}: the update moved a frozen weight"
        )
        result["update_metrics"] = {k: metrics[k] for k in sorted(metrics) if k.startswith("train/")}
        done("update")

        phase("greedy")
        unmerged = decide(policy, "greedy", seed=1)
        done("greedy")

        phase("save")
        save_dir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=args.out))
        t_save = time.perf_counter()
        policy.save_pretrained(str(save_dir))
        times["save_pretrained"] = time.perf_counter() - t_save
        result["saved_gib"] = sum(f.stat().st_size for f in save_dir.iterdir()) / GIB
        done("save")

        # the folder holds the LoRA deltas merged into the bf16 base weights: the decision it must reproduce is
        # that of the policy merged the same way in place (the unmerged one differs by the export's rounding)
        phase("merged")
        merge_lora_(policy)
        ref = decide(policy, "greedy", seed=1)
        done("merged")

        phase("reload")
        del policy, optimizer, out, batch, params, trainable, lora, lora_before, frozen, blocks
        gc.collect()
        t_load = time.perf_counter()
        again = load_policy(str(save_dir), is_lora=True, lora_rank=32)
        times["load_policy"] = time.perf_counter() - t_load
        if dev.type == "cuda":
            again = again.to(dev)
        else:
            cpu_float32_products(again)
        rep = decide(again, "greedy", seed=1)
        d_actions = (rep.actions - ref.actions).abs().max().item()
        d_logp = (rep.logprobs - ref.logprobs).abs().max().item()
        d_export = (rep.actions - unmerged.actions).abs().max().item()
        scale = max(ref.actions.abs().max().item(), 1.0)
        result.update(
            reload_max_action_diff=d_actions,
            reload_max_logprob_diff=d_logp,
            export_rounding_action_diff=d_export,
        )
        print(
            f"  reloaded greedy decision vs the merged policy's: max |action diff| {d_actions:.3g}, max |logprob "
            f"diff| {d_logp:.3g}; vs the unmerged policy's (the bf16 export's rounding): {d_export:.3g}"
        )
        check(
            d_actions <= RELOAD_TOLERANCE * scale,
            f"{name}: the reloaded policy's greedy decision differs from the merged policy's by {d_actions:.3g} "
            f"(> {RELOAD_TOLERANCE * scale:.3g})",
        )
        done("reload")
        shutil.rmtree(save_dir, ignore_errors=True)

        watch.stop()
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        cuda_peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else None
        result.update(
            ok=True,
            base_gib=base / GIB,
            activations_gib=activations / GIB,
            optimizer_and_grads_gib=train_state / GIB,
            float32_products_gib=products / GIB,
            bound_gib=bound / GIB,
            peak_rss_gib=peak / GIB,
            ratio=peak / bound,
            phase_peak_gib={k: v / GIB for k, v in watch.peaks.items()},
            times_s=times,
            cuda_peak_gib=None if cuda_peak is None else cuda_peak / GIB,
        )
    except BenchFailure as e:
        result["error"] = str(e)
        print(f"FAILURE: {e}", flush=True)
    out_file.write_text(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


# --------------------------------------------------------------------------------------------------------- parent
def available_bytes() -> int:
    import psutil

    return psutil.virtual_memory().available


def needed_bytes(name: str, layers: int | None) -> float:
    """Memory a family needs available before it starts: the guide threshold at real size; a --layers run
    scales the weights by its share of the decoder (embeddings and towers stay)."""
    if layers is None:
        return REAL_SIZE_AVAILABLE_GB[name] * 1e9
    depth = 32 if name.startswith("openvla") else 18
    share = min(1.0, 0.25 + 0.75 * layers / depth)
    return (REAL_SIZE_PARAMS_B[name] * 2 * share * 1.3 + 1.5) * 1e9


def wait_for_memory(name: str, need: float, wait_min: float) -> bool:
    deadline = time.monotonic() + wait_min * 60
    while True:
        have = available_bytes()
        if have >= need:
            return True
        if time.monotonic() >= deadline:
            print(
                f"{name}: SKIPPED: {have / 1e9:.1f} GB available after {wait_min:.0f} min, needs {need / 1e9:.1f} GB"
            )
            return False
        print(
            f"{name}: waiting for memory ({have / 1e9:.1f} GB available, needs {need / 1e9:.1f} GB)",
            flush=True,
        )
        time.sleep(60)


def run_parent(args: argparse.Namespace) -> int:
    Path(args.out).mkdir(parents=True, exist_ok=True)
    failed = []
    rows = []
    for name in args.families:
        need = needed_bytes(name, args.layers)
        disk = shutil.disk_usage(args.out).free
        save_need = REAL_SIZE_PARAMS_B[name] * 2e9 * (1.0 if args.layers is None else need / 1e9 / 20)
        if disk < 1.2 * save_need:
            print(
                f"{name}: FAILED: {args.out} has {disk / 1e9:.1f} GB free, the save needs {save_need / 1e9:.1f} GB"
            )
            failed.append(name)
            continue
        if args.device == "cpu" and not wait_for_memory(name, need, args.wait_min):
            failed.append(name)
            continue
        size = "real size" if args.layers is None else f"{args.layers} decoder layers"
        print(f"{name} ({size}, {args.device}, {args.threads} threads):", flush=True)
        result_file = Path(args.out) / f"{name}.json"
        result_file.unlink(missing_ok=True)
        abort = 0.95 * available_bytes() if args.device == "cpu" else 1e15
        cmd = [
            sys.executable,
            __file__,
            "--child",
            name,
            "--result",
            str(result_file),
            "--abort-bytes",
            str(int(abort)),
        ]
        cmd += ["--device", args.device, "--threads", str(args.threads), "--out", args.out]
        cmd += [] if args.layers is None else ["--layers", str(args.layers)]
        cmd += ["--film"] if args.film else []
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        proc = subprocess.Popen(cmd, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        for saved in Path(args.out).glob(f"{name}-*"):  # the save of a child that failed or aborted
            shutil.rmtree(saved, ignore_errors=True)
        code = os.waitstatus_to_exitcode(status)
        result = json.loads(result_file.read_text()) if result_file.exists() else {"ok": False}
        if code != 0 or not result.get("ok"):
            why = result.get("error") or f"exit code {code}"
            print(f"{name}: FAILED ({why}); peak RSS {usage.ru_maxrss / 2**20:.2f} GiB")
            failed.append(name)
            continue
        peak = usage.ru_maxrss * 1024 / GIB  # the child's own high-water mark (wait4 rusage)
        ratio = peak / result["bound_gib"]
        t = result["times_s"]
        print(
            f"{name}: {result['params_b']:.2f}B params, peak RSS {peak:.2f} GiB vs bound {result['bound_gib']:.2f} "
            f"GiB (process {result['base_gib']:.2f} + weights {result['weights_gib']:.2f} + grads/AdamW "
            f"{result['optimizer_and_grads_gib']:.2f} + activations {result['activations_gib']:.2f} + float32 "
            f"products {result['float32_products_gib']:.2f}): "
            f"ratio {ratio:.2f} (<= {RATIO_LIMIT}); phases "
            + ", ".join(f"{k} {v:.1f} s" for k, v in t.items())
            + "; phase peaks "
            + ", ".join(f"{k} {v:.2f}" for k, v in result["phase_peak_gib"].items())
            + " GiB"
        )
        if result.get("cuda_peak_gib") is not None:
            print(f"{name}: peak CUDA memory {result['cuda_peak_gib']:.2f} GiB")
        rows.append({**result, "peak_rss_gib": peak, "ratio": ratio})
        if ratio > RATIO_LIMIT:
            print(f"{name}: FAILED: peak RSS is {ratio:.2f}x the bound")
            failed.append(name)
    (Path(args.out) / "summary.json").write_text(json.dumps(rows, indent=2))
    print("PASS" if not failed else f"FAIL: {', '.join(failed)}")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--layers", type=int, default=None, help="decoder layers (default: the real depth)")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "real_size_cpu"), help="save folder")
    ap.add_argument("--wait-min", type=float, default=20.0, help="minutes to wait for available memory")
    ap.add_argument("--film", action="store_true", help="OpenVLA-OFT with FiLM (the guides set it off)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--abort-bytes", type=float, default=float("inf"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.layers is not None and args.layers < 1:
        ap.error(f"--layers must be >= 1, got {args.layers}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            ap.error("--device cuda: no CUDA device is available")
    return run_child(args) if args.child else run_parent(args)


if __name__ == "__main__":
    sys.exit(main())
