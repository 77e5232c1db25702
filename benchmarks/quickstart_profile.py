"""Where one quickstart PPO iteration spends its time, and how fast its update trains against a bare loop.

    python benchmarks/quickstart_profile.py [--iterations 4] [--policy runs/sft/metaworld_ppo_tiny_cpu/policy]
        [--config metaworld_ppo_tiny_cpu] [Hydra overrides ...]

Runs the quickstart's config (`vla-train`'s runner, local backend, in this process) for a few RL iterations
without evaluations or checkpoints, and prints, over the iterations after the first (warm-up):

- each phase's share of one iteration (`time/<phase>` of metrics.jsonl): the rollout, split into the policy's
  `predict` and the simulators' `chunk_step`; the actor update, split into the optimizer passes (`ppo_update`) and
  what comes before them (trajectory hand-over, advantages, flattening); weight sync; the rest (logging);
- the update's samples/s (samples x `algorithm.update_epoch` / the `actor_update` phase) against a bare loop that
  trains a copy of the same model (same weights, optimizer state, micro-batch and minibatch sizes, same number of
  passes) on the same batch with a minimal loss: shuffle, `policy.evaluate`, backward, optimizer step, nothing
  else. The ratio (goal >= 0.9) is what the framework leaves of the model's own training speed.

The bare loop runs right before and right after each iteration's update, on that iteration's batch, so both see
the same background load; its time is taken out of the iteration's figures. The policy's weights do not change the cost
(every rollout has the same number of decisions), so without `--policy` the randomly initialised model is used.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

#: time spent inside the wrapped calls during the current iteration, by name
_SPENT: dict[str, float] = defaultdict(float)
#: per iteration: the wrapped calls' time, the bare loop's time and samples
_UPDATE_THREADS = [0]  # intra-op threads inside the update (and its bare loop)
_ITERATIONS: list[dict[str, float]] = []


def _timed(name: str, fn: Any) -> Any:
    @functools.wraps(fn)  # keeps the vla_infra `register` tags of worker methods
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _SPENT[name] += time.perf_counter() - t0

    return wrapper


def bare_update(
    policy: Any,
    optimizer: torch.optim.Optimizer,
    batch: Any,
    *,
    update_epoch: int,
    global_batch_size: int,
    micro_batch_size: int,
) -> tuple[float, int]:
    """Train `policy` on `batch` as `ppo_update` would, without the framework: (seconds, sample passes)."""
    fi_all = batch.forward_inputs
    idx_all = torch.nonzero(batch.mask, as_tuple=False).squeeze(-1)
    n = len(idx_all)
    generator = torch.Generator().manual_seed(0)
    policy.eval()
    forward = 0.0
    t0 = time.perf_counter()
    for _ in range(update_epoch):
        perm = idx_all[torch.randperm(n, generator=generator)]
        for start in range(0, n, global_batch_size):
            minibatch = perm[start : start + global_batch_size]
            optimizer.zero_grad(set_to_none=True)
            for m in range(0, len(minibatch), micro_batch_size):
                micro = minibatch[m : m + micro_batch_size]
                t_forward = time.perf_counter()
                logprobs, _, values = policy.evaluate({k: v[micro] for k, v in fi_all.items()})
                forward += time.perf_counter() - t_forward
                loss = -logprobs.float().mean() + (0.0 if values is None else values.float().pow(2).mean())
                loss.backward()
            optimizer.step()
    _SPENT["bare_forward"] += forward / 2  # run twice per update (before and after it)
    return time.perf_counter() - t0, n * update_epoch


def _profiled_ppo_update(original: Any) -> Any:
    @functools.wraps(original)
    def wrapper(policy: Any, optimizer: Any, batch: Any, algo: Any, optim: Any, **kwargs: Any) -> Any:
        # the bare loop runs once before and once after, on copies (same weights and Adam state): a load that
        # changes during the update weighs on both sides alike
        twins = [copy.deepcopy((policy, optimizer)) for _ in range(2)]
        _UPDATE_THREADS[0] = torch.get_num_threads()  # actor.torch_num_threads, the bare loop's as well
        sizes = {
            "update_epoch": algo.update_epoch,
            "global_batch_size": kwargs["global_batch_size"],
            "micro_batch_size": kwargs["micro_batch_size"],
        }
        before_s, bare_samples = bare_update(*twins[0], batch, **sizes)
        policy.evaluate = _timed("update_forward", policy.evaluate)  # this instance only, for this call
        t0 = time.perf_counter()
        try:
            out = original(policy, optimizer, batch, algo, optim, **kwargs)
        finally:
            _SPENT["ppo_update"] += time.perf_counter() - t0
            del policy.evaluate
        after_s, _ = bare_update(*twins[1], batch, **sizes)
        _SPENT["bare_loop"] += before_s + after_s  # taken out of the iteration's time
        _SPENT["bare_mean"] += (before_s + after_s) / 2
        _SPENT["bare_samples"] += bare_samples
        _SPENT["update_samples"] += float(out[0].get("train/actor/num_samples", 0.0)) * algo.update_epoch
        return out

    return wrapper


def install_probes() -> None:
    """Wrap the rollout's `predict`, the simulators' `chunk_step` and the update's `ppo_update` (every module of
    the app that imported it) with timers; each iteration's sums are moved to `_ITERATIONS` by the logger probe."""
    import train_embodied.update as update_module
    from train_embodied import workers

    for cls, method, name in (
        (workers.RolloutWorker, "predict", "predict"),
        (workers.EnvWorker, "chunk_step", "chunk_step"),
    ):
        setattr(cls, method, _timed(name, getattr(cls, method)))
    original = update_module.ppo_update
    wrapped = _profiled_ppo_update(original)
    for module in list(sys.modules.values()):
        if (
            getattr(module, "__name__", "").startswith("train_embodied")
            and getattr(module, "ppo_update", None) is original
        ):
            module.ppo_update = wrapped


def read_iterations(log_dir: Path) -> list[dict[str, float]]:
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "time/step" in r]


class _IterationProbe:
    """Moves `_SPENT` to `_ITERATIONS` each time the runner logs an iteration (it logs once per iteration)."""

    def __init__(self, logger: Any) -> None:
        self._logger = logger

    def log(self, metrics: dict[str, float], step: int) -> None:
        if "time/step" in metrics:
            _ITERATIONS.append(dict(_SPENT))
            _SPENT.clear()
        self._logger.log(metrics, step=step)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="metaworld_ppo_tiny_cpu")
    parser.add_argument("--iterations", type=int, default=4, help="RL iterations; the first is a warm-up")
    parser.add_argument("--policy", default=None, help="a vla-sft policy folder (default: random init)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for the config")
    args = parser.parse_args()
    if args.iterations < 2:
        parser.error("--iterations must be at least 2 (the first is a warm-up)")

    from train_embodied import runner
    from train_embodied.cli import train_main

    install_probes()
    make_logger = runner.make_logger
    runner.make_logger = lambda *a, **k: _IterationProbe(make_logger(*a, **k))

    log_dir = Path(tempfile.mkdtemp(prefix="quickstart_profile_")) / "run"
    overrides = [
        f"runner.max_epochs={args.iterations}",
        "runner.eval_before_train=false",
        "runner.eval_after_train=false",
        "runner.save_interval=-1",
        "runner.progress_bar=false",
        "runner.logger.logger_backends=[tensorboard]",
        f"runner.logger.log_dir={log_dir}",
        *([f"actor.model.model_path={args.policy}"] if args.policy else []),
        *args.overrides,
    ]
    load_start = os.getloadavg()[0]
    wall0 = time.perf_counter()
    if train_main([args.config, *overrides]) != 0:
        raise SystemExit("vla-train failed")
    wall = time.perf_counter() - wall0
    rows = read_iterations(log_dir)[1:]  # the first iteration is a warm-up
    probes = _ITERATIONS[1:]
    k = len(rows)

    def mean(values: list[float]) -> float:
        return sum(values) / max(len(values), 1)

    bare = mean([p.get("bare_loop", 0.0) for p in probes])
    step = mean([r["time/step"] for r in rows]) - bare
    rollout = mean([r.get("time/generate_rollouts", 0.0) for r in rows])
    update = mean([r.get("time/actor_update", 0.0) for r in rows]) - bare
    sync = mean([r.get("time/sync_weights", 0.0) for r in rows])
    predict = mean([p.get("predict", 0.0) for p in probes])
    sim = mean([p.get("chunk_step", 0.0) for p in probes])
    passes = mean([p.get("ppo_update", 0.0) for p in probes])
    other = step - rollout - update - sync

    def line(name: str, seconds: float, detail: str = "") -> str:
        return f"  {name:<28} {seconds:7.2f} s  {100 * seconds / step:5.1f} %  {detail}"

    print(f"\n{args.config}: {k} iterations after a warm-up (wall {wall:.0f} s for the whole command)")
    print(f"one iteration: {step:.2f} s, of which")
    print(line("rollout (generate_rollouts)", rollout))
    print(line("  policy predict", predict))
    print(line("  simulators (chunk_step)", sim))
    print(line("  rest of the rollout", rollout - predict - sim))
    print(line("actor update (actor_update)", update))
    print(line("  optimizer passes", passes, "(ppo_update)"))
    fwd = mean([p.get("update_forward", 0.0) for p in probes])
    bare_fwd = mean([p.get("bare_forward", 0.0) for p in probes])
    bare_mean = mean([p.get("bare_mean", 0.0) for p in probes])
    print(line("    policy.evaluate", fwd, f"(bare loop: {bare_fwd:.2f} s)"))
    print(line("    loss, backward, step", passes - fwd, f"(bare loop: {bare_mean - bare_fwd:.2f} s)"))
    print(line("  before them", update - passes, "(hand-over, advantages, flattening)"))
    print(line("weight sync", sync))
    print(line("rest (logging, metrics)", other))
    samples = mean([p.get("update_samples", 0.0) for p in probes])
    bare_samples = mean([p.get("bare_samples", 0.0) for p in probes])
    rate = samples / update
    rate_passes = samples / passes
    rate_bare = bare_samples / mean([p.get("bare_mean", 0.0) for p in probes])
    print(
        f"update: {samples:.0f} sample passes (samples x update_epoch) per iteration: {rate:.0f} samples/s over "
        f"the actor_update phase, {rate_passes:.0f} samples/s inside ppo_update; bare forward+backward loop of the "
        f"same model on the same batch: {rate_bare:.0f} samples/s"
    )
    ratio = rate / rate_bare
    print(
        f"overhead ratio (actor_update phase / bare loop): {ratio:.2f} (goal >= 0.9); "
        f"ppo_update / bare loop: {rate_passes / rate_bare:.2f}"
    )
    load_end = os.getloadavg()[0]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} torch thread(s) ({_UPDATE_THREADS[0]} in the update), "
        f"{os.cpu_count()} CPUs, "
        f"1-min load average {load_start:.1f} at the start, {load_end:.1f} at the end"
    )


if __name__ == "__main__":
    main()
