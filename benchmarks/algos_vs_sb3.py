"""Stable-Baselines3's PPO and vla_algos' gymnasium example (packages/vla-algos/examples/ppo_gymnasium.py), side by side.

    python benchmarks/algos_vs_sb3.py [--tasks CartPole-v1 Pendulum-v1 Hopper-v5] [--seeds 5] [--steps N]
        [--json PATH] [--plot PATH]

Both train with the same hyper-parameters (the RL Baselines3 Zoo's tuned PPO settings of each task), the same
number of env steps, the same seeds and the same env pipeline (the example's `make_env`: gymnasium's episode
statistics and, where the Zoo normalises, gymnasium's observation and reward normalisation), on the CPU with one
torch thread, one run at a time, the two implementations interleaved seed by seed (alternating which goes first) so
that both see the same background load.

Per task it prints the mean return over the last 20 training episodes and over 10 held-out evaluation episodes
(greedy actions, starts seeded apart from training) of each, the difference example - SB3 with a 95% bootstrap
confidence interval over the seeds, env steps per CPU-second of each and their ratio (example / SB3), then a last
line with the worst task's return ratio ((example - random) / (SB3 - random), the random policy's held-out return
measured in the same run) and speed ratio. Goal, on every task run: the held-out return is not significantly worse
than SB3's (the upper end of the difference's interval is >= 0) and the example is at least as fast per env step
(speed ratio >= 1). Exits 1 when the goal is not met, 2 on bad arguments.

SB3 is a benchmark dependency only (requirements-dev.txt); the example needs vla-algos and gymnasium.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import sys
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "packages" / "vla-algos" / "examples" / "ppo_gymnasium.py"
LAST_EPISODES = 20
EVAL_EPISODES = 10
BINS = 40  # points of each learning curve


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("ppo_gymnasium", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ppo_gymnasium"] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Task:
    """One task's RL Zoo settings, in SB3's terms (`PPO(**sb3)`), with its env pipeline and default length."""

    env_id: str
    steps: int
    n_envs: int
    normalize: bool
    sb3: dict[str, Any]
    lr_schedule: str = "constant"  # "linear": the Zoo's `lin_` learning rate
    clip_schedule: str = "constant"  # "linear": the Zoo's `lin_` clip range
    policy_kwargs: dict[str, Any] = field(default_factory=dict)
    note: str = ""


# hyperparams/ppo.yml of the RL Baselines3 Zoo (rl-baselines3-zoo), entries "CartPole-v1", "Pendulum-v1" and
# "Hopper-v3" (Hopper-v5 is the same robot and reward with gymnasium's current MuJoCo bindings)
TASKS = {
    "CartPole-v1": Task(
        "CartPole-v1",
        100_000,
        8,
        False,
        dict(
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=1e-3,
            clip_range=0.2,
        ),
        lr_schedule="linear",
        clip_schedule="linear",
    ),
    "Pendulum-v1": Task(
        "Pendulum-v1",
        100_000,
        4,
        False,
        dict(
            n_steps=1024,
            gae_lambda=0.95,
            gamma=0.9,
            n_epochs=10,
            ent_coef=0.0,
            learning_rate=1e-3,
            clip_range=0.2,
        ),
        note="the Zoo's gSDE exploration (use_sde) left out on both sides: the example samples a plain Gaussian",
    ),
    "Hopper-v5": Task(
        "Hopper-v5",
        100_000,
        1,
        True,
        dict(
            batch_size=32,
            n_steps=512,
            gamma=0.999,
            learning_rate=9.80828e-05,
            ent_coef=0.00229519,
            clip_range=0.2,
            n_epochs=5,
            gae_lambda=0.99,
            max_grad_norm=0.7,
            vf_coef=0.835671,
        ),
        policy_kwargs=dict(log_std_init=-2.0, ortho_init=False, activation="relu", hidden_sizes=(256, 256)),
        note="the Zoo trains 1e6 steps; 1e5 here by default (2 shared CPU cores)",
    ),
}
SB3_DEFAULTS = dict(
    learning_rate=3e-4,
    n_steps=2048,
    batch_size=64,
    n_epochs=10,
    gamma=0.99,
    gae_lambda=0.95,
    clip_range=0.2,
    clip_range_vf=None,
    normalize_advantage=True,
    ent_coef=0.0,
    vf_coef=0.5,
    max_grad_norm=0.5,
    target_kl=None,
)


def example_args(ex: Any, task: Task, seed: int, steps: int) -> Any:
    """The example's `Args` holding the same settings as `PPO(**sb3_kwargs(task))`."""
    s = {**SB3_DEFAULTS, **task.sb3}
    pk = task.policy_kwargs
    return ex.Args(
        env_id=task.env_id,
        seed=seed,
        total_steps=steps,
        num_envs=task.n_envs,
        num_steps=s["n_steps"],
        batch_size=s["batch_size"],
        update_epoch=s["n_epochs"],
        learning_rate=s["learning_rate"],
        anneal_lr=task.lr_schedule == "linear",
        anneal_clip=task.clip_schedule == "linear",
        max_grad_norm=s["max_grad_norm"],
        target_kl=s["target_kl"],
        gamma=s["gamma"],
        gae_lambda=s["gae_lambda"],
        whiten_advantages="minibatch" if s["normalize_advantage"] else "none",
        clip_ratio_low=s["clip_range"],
        clip_ratio_high=s["clip_range"],
        value_clip=s["clip_range_vf"],
        value_clip_mode="clipped",
        value_loss_coef=2.0
        * s["vf_coef"],  # SB3: vf_coef * mean((R - V)**2); vla_algos: coef * mean((R - V)**2 / 2)
        entropy_bonus=s["ent_coef"],
        hidden_sizes=tuple(pk.get("hidden_sizes", (64, 64))),
        activation=pk.get("activation", "tanh"),
        ortho_init=pk.get("ortho_init", True),
        log_std_init=pk.get("log_std_init", 0.0),
        normalize_env=task.normalize,
        torch_threads=1,
    )


def sb3_kwargs(task: Task) -> dict[str, Any]:
    """`PPO(...)` keywords of the task (schedules as SB3 callables, the network as `policy_kwargs`)."""
    from torch import nn

    kw: dict[str, Any] = dict(task.sb3)
    if task.lr_schedule == "linear":
        lr0 = kw["learning_rate"]
        kw["learning_rate"] = lambda progress_remaining: progress_remaining * lr0
    if task.clip_schedule == "linear":
        clip0 = kw["clip_range"]
        kw["clip_range"] = lambda progress_remaining: progress_remaining * clip0
    pk = task.policy_kwargs
    if pk:
        hidden = list(pk.get("hidden_sizes", (64, 64)))
        kw["policy_kwargs"] = dict(
            log_std_init=pk.get("log_std_init", 0.0),
            ortho_init=pk.get("ortho_init", True),
            activation_fn={"tanh": nn.Tanh, "relu": nn.ReLU}[pk.get("activation", "tanh")],
            net_arch=dict(pi=hidden, vf=hidden),
        )
    return kw


@dataclass
class Run:
    impl: str  # "example" or "sb3"
    seed: int
    steps: int
    cpu_seconds: float
    wall_seconds: float
    episode_steps: list[int]
    episode_returns: list[float]
    eval_returns: list[float]
    load: str  # /proc/loadavg's 1-, 5-, 15-minute averages when the run ended

    @property
    def train_return(self) -> float:
        return float(np.mean(self.episode_returns[-LAST_EPISODES:]))

    @property
    def eval_return(self) -> float:
        return float(np.mean(self.eval_returns))


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def held_out_seeds(seed: int) -> list[int]:
    """Evaluation starts no training env used (training env i of seed s starts from s + i, then from its own RNG)."""
    return list(range(10_000 + 1000 * seed, 10_000 + 1000 * seed + EVAL_EPISODES))


def run_example(ex: Any, task: Task, seed: int, steps: int, *, evaluate: bool = True) -> Run:
    args = example_args(ex, task, seed, steps)
    wall, cpu = time.perf_counter(), time.process_time()
    result = ex.train(args, log=None)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    returns = []
    if evaluate:
        returns = ex.evaluate(
            ex.greedy_actor(result.agent), args, held_out_seeds(seed), result.obs_normalizer
        )
    return Run(
        "example",
        seed,
        result.env_steps,
        cpu,
        wall,
        result.episodes.steps,
        result.episodes.returns,
        returns,
        loadavg(),
    )


def run_sb3(ex: Any, task: Task, seed: int, steps: int, *, evaluate: bool = True) -> Run:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import DummyVecEnv

    class Episodes(BaseCallback):
        """Raw returns of finished training episodes (the env pipeline's episode statistics)."""

        def __init__(self) -> None:
            super().__init__()
            self.steps: list[int] = []
            self.returns: list[float] = []

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.steps.append(self.num_timesteps)
                    self.returns.append(float(info["episode"]["r"]))
            return True

    torch.set_num_threads(1)
    args = example_args(ex, task, seed, steps)
    env = DummyVecEnv([ex.make_env(task.env_id, normalize=task.normalize, gamma=args.gamma)] * task.n_envs)
    model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **sb3_kwargs(task))
    # SB3's default logger writes an empty /tmp/SB3-<date> folder per model
    model.set_logger(Logger(folder=None, output_formats=[]))
    episodes = Episodes()
    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(steps, callback=episodes)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    obs_rms = env.envs[0].get_wrapper_attr("obs_rms") if task.normalize else None
    returns = []
    if evaluate:
        act = lambda o: model.predict(o, deterministic=True)[0]  # noqa: E731
        returns = ex.evaluate(act, args, held_out_seeds(seed), obs_rms)
    env.close()
    return Run(
        "sb3", seed, int(model.num_timesteps), cpu, wall, episodes.steps, episodes.returns, returns, loadavg()
    )


def random_return(ex: Any, task: Task) -> float:
    """Held-out return of uniformly random actions (the zero of the return ratio)."""
    import gymnasium as gym

    space = gym.make(task.env_id).action_space
    space.seed(0)
    args = example_args(ex, replace(task, normalize=False), 0, 0)
    return float(np.mean(ex.evaluate(lambda o: np.stack([space.sample()]), args, held_out_seeds(0))))


def bootstrap_diff(
    a: list[float], b: list[float], *, reps: int = 10_000, seed: int = 0
) -> tuple[float, float, float]:
    """mean(a) - mean(b) and its 95% percentile bootstrap interval (seeds resampled within each side)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    rng = np.random.default_rng(seed)
    d = x[rng.integers(0, len(x), (reps, len(x)))].mean(1) - y[rng.integers(0, len(y), (reps, len(y)))].mean(
        1
    )
    lo, hi = np.percentile(d, [2.5, 97.5])
    return float(x.mean() - y.mean()), float(lo), float(hi)


def learning_curve(runs: list[Run], steps: int) -> tuple[list[float], list[float], list[float]]:
    """Mean over seeds (and its standard error) of the mean training return of the episodes that ended in each of
    `BINS` equal spans of env steps (a span without an episode carries the last value)."""
    edges = np.linspace(0, steps, BINS + 1)
    per_seed = []
    for run in runs:
        s, r = np.asarray(run.episode_steps), np.asarray(run.episode_returns)
        curve, last = [], np.nan
        for lo, hi in itertools.pairwise(edges):
            sel = (s > lo) & (s <= hi)
            last = float(r[sel].mean()) if sel.any() else last
            curve.append(last)
        per_seed.append(curve)
    arr = np.asarray(per_seed)
    with warnings.catch_warnings():  # spans before any seed's first episode ended: NaN, not a warning
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(arr, 0)
        sem = np.nanstd(arr, 0) / np.sqrt(max(1, len(runs)))
    return list(edges[1:]), list(mean), list(sem)


def plot(results: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.6), squeeze=False)
    for ax, (task, res) in zip(axes[0], results.items()):
        for impl, colour, label in (
            ("sb3", "tab:blue", "Stable-Baselines3 PPO"),
            ("example", "tab:red", "vla_algos example"),
        ):
            x, m, e = (np.asarray(v) for v in res["curves"][impl])
            ax.plot(x, m, color=colour, label=label)
            ax.fill_between(x, m - e, m + e, color=colour, alpha=0.2)
        ax.set_title(f"{task} ({len(res['runs']['sb3'])} seeds)")
        ax.set_xlabel("env steps")
        ax.set_ylabel("training episode return")
        ax.grid(alpha=0.3)
    axes[0][0].legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), help=f"any of: {', '.join(TASKS)}")
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 (>= 2 for an interval)")
    parser.add_argument(
        "--steps", type=int, default=None, help="env steps per run (default: each task's Zoo figure)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write every run's figures and curves here")
    parser.add_argument(
        "--plot", type=Path, default=None, help="write both learning curves of each task here (PNG)"
    )
    a = parser.parse_args(argv)
    unknown = [t for t in a.tasks if t not in TASKS]
    if unknown:
        print(f"error: --tasks {' '.join(unknown)}: unknown; valid: {', '.join(TASKS)}")
        return 2
    if a.seeds < 2 or (a.steps is not None and a.steps < 1):
        print("error: --seeds must be >= 2 and --steps >= 1")
        return 2
    ex = load_example()
    print(f"torch {torch.__version__}, 1 thread; load average at start {loadavg()}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    rows = []
    for name in a.tasks:
        task = TASKS[name]
        steps = a.steps or task.steps
        runs: dict[str, list[Run]] = {"example": [], "sb3": []}
        # two rollouts and updates of each, not timed: first-call costs (lazy imports, allocations) count for neither
        warm_up = task.n_envs * {**SB3_DEFAULTS, **task.sb3}["n_steps"] * 2
        run_example(ex, task, 999, warm_up, evaluate=False)
        run_sb3(ex, task, 999, warm_up, evaluate=False)
        for seed in range(a.seeds):
            order = (run_example, run_sb3) if seed % 2 == 0 else (run_sb3, run_example)
            for fn in order:
                r = fn(ex, task, seed, steps)
                runs[r.impl].append(r)
                print(
                    f"  {name} seed {seed} {r.impl:7s}: train {r.train_return:9.1f} eval {r.eval_return:9.1f} "
                    f"{r.steps / r.cpu_seconds:7.0f} steps/cpu-s ({r.wall_seconds:.0f} s wall, load {r.load})",
                    flush=True,
                )
        ex_r, sb_r = runs["example"], runs["sb3"]
        train = bootstrap_diff([r.train_return for r in ex_r], [r.train_return for r in sb_r])
        held = bootstrap_diff([r.eval_return for r in ex_r], [r.eval_return for r in sb_r])
        speed = {k: sum(r.steps for r in v) / sum(r.cpu_seconds for r in v) for k, v in runs.items()}
        rand = random_return(ex, task)
        sb_mean = float(np.mean([r.eval_return for r in sb_r]))
        ex_mean = float(np.mean([r.eval_return for r in ex_r]))
        return_ratio = (ex_mean - rand) / (sb_mean - rand) if sb_mean != rand else float("nan")
        ok_return, ok_speed = held[2] >= 0, speed["example"] / speed["sb3"] >= 1.0
        rows.append((name, return_ratio, speed["example"] / speed["sb3"], ok_return, ok_speed))
        results[name] = {
            "steps": steps,
            "train_diff": train,
            "eval_diff": held,
            "speed": speed,
            "random_return": rand,
            "return_ratio": return_ratio,
            "runs": {k: [vars(r) for r in v] for k, v in runs.items()},
            "curves": {k: learning_curve(v, steps) for k, v in runs.items()},
            "note": task.note,
        }
        if a.json is not None:  # after every task: a long run that stops keeps what it measured
            a.json.parent.mkdir(parents=True, exist_ok=True)
            a.json.write_text(json.dumps(results, indent=1))
        print(
            f"{name} | {steps} steps x {a.seeds} seeds | train return example "
            f"{np.mean([r.train_return for r in ex_r]):.1f} SB3 {np.mean([r.train_return for r in sb_r]):.1f} "
            f"diff {train[0]:+.1f} [{train[1]:+.1f}, {train[2]:+.1f}] | held-out example {ex_mean:.1f} SB3 "
            f"{sb_mean:.1f} (random {rand:.1f}) diff {held[0]:+.1f} [{held[1]:+.1f}, {held[2]:+.1f}] | steps/cpu-s "
            f"example {speed['example']:.0f} SB3 {speed['sb3']:.0f} ratio {speed['example'] / speed['sb3']:.2f} | "
            f"{'ok' if ok_return and ok_speed else 'NOT MET: ' + ('return' if not ok_return else 'speed')}",
            flush=True,
        )
    worst_return = min(rows, key=lambda r: r[1])
    worst_speed = min(rows, key=lambda r: r[2])
    met = all(r[3] and r[4] for r in rows)
    print(
        f"worst: return ratio {worst_return[1]:.3f} ({worst_return[0]}), speed ratio {worst_speed[2]:.2f} "
        f"({worst_speed[0]}); load average at end {loadavg()}; goal {'MET' if met else 'NOT MET'}"
    )
    if a.plot is not None:
        plot(results, a.plot)
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
