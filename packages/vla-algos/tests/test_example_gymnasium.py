"""The gymnasium example (examples/ppo_gymnasium.py) learns, from the package alone.

The learning run is a subprocess whose import path holds exactly what `pip install packages/vla-algos gymnasium`
installs: the standard library, vla_algos' source and the distributions its metadata and gymnasium's require
(torch, numpy, ... found through `importlib.metadata`), nothing else of this environment. An import of anything
else (the app, vla-envs, SB3) fails the run.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLE = PACKAGE / "examples" / "ppo_gymnasium.py"
# the RL Baselines3 Zoo's CartPole-v1 settings (hyperparams/ppo.yml), a third of its 100k steps
CARTPOLE = [
    *("--env-id", "CartPole-v1", "--num-envs", "8", "--num-steps", "32", "--batch-size", "256"),
    *("--update-epoch", "20", "--gamma", "0.98", "--gae-lambda", "0.8", "--learning-rate", "1e-3"),
    *("--anneal-lr", "--anneal-clip", "--total-steps", "30000", "--seed", "0"),
]


def dependency_closure(names: list[str]) -> set[str]:
    """Distributions `names` need, theirs included (requirements without an extra whose marker holds here)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for text in metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def isolated_path(tmp_path: Path) -> str:
    """A PYTHONPATH of vla_algos' source and links to the top-level modules of its and gymnasium's dependencies."""
    links = tmp_path / "site"
    links.mkdir()
    for name in dependency_closure(["vla-algos", "gymnasium"]) - {"vla-algos"}:
        dist = metadata.distribution(name)
        for top in {f.parts[0] for f in dist.files or []}:
            if top.endswith((".dist-info", ".egg-info", ".pth")) or top in ("..", "__pycache__"):
                continue
            target = Path(dist.locate_file(top))
            if target.exists() and not (links / top).exists():
                (links / top).symlink_to(target)
    return os.pathsep.join([str(PACKAGE / "src"), str(links)])


def test_example_learns_cartpole_from_the_package_alone(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = isolated_path(tmp_path)
    # -S: no site-packages of this environment; only the path above
    out = subprocess.run(
        [sys.executable, "-S", str(EXAMPLE), *CARTPOLE, "--eval-episodes", "10"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    last = out.stdout.strip().splitlines()[-1]
    held_out = float(last.split("held-out return ")[1].split()[0])
    # a random policy balances ~22 steps; the Zoo's settings reach the 500-step limit
    assert held_out >= 300, out.stdout[-3000:]


@pytest.fixture(scope="module", name="ex")
def _example() -> Any:
    spec = importlib.util.spec_from_file_location("ppo_gymnasium", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ppo_gymnasium"] = module
    spec.loader.exec_module(module)
    return module


def test_grpo_rollout_scores_each_groups_first_episodes(ex):
    """GRPO through the same loop: groups of envs from one seeded start, one episode each, group-relative
    advantages on the first episode's steps only, no critic."""
    torch.manual_seed(0)
    args = ex.Args(
        env_id="CartPole-v1", adv_type="grpo", loss_type="actor", group_size=4, num_envs=8, num_steps=500
    )
    ex.check(args)
    envs = ex.make_envs(args)
    obs, _ = envs.reset(seed=ex.group_seeds(args, iteration=3))
    np.testing.assert_array_equal(obs[:4], np.broadcast_to(obs[0], (4, obs.shape[1])))
    assert not np.array_equal(obs[0], obs[4])
    agent = ex.ActorCritic(
        4, envs.single_action_space, hidden_sizes=(8,), activation="tanh", ortho_init=True, log_std_init=0.0
    )
    buf = ex.Rollout.empty(args.num_steps, args.num_envs, 4, envs.single_action_space)
    episodes = ex.EpisodeLog()
    ex.collect(
        envs, agent, buf, obs, needs_values=False, first_episodes_only=True, episodes=episodes, global_step=0
    )
    done = torch.from_numpy((buf.terminated | buf.truncated)[: buf.length])
    assert bool(done.any(0).all()) and buf.length < args.num_steps  # stopped once every env's episode ended
    first_len = done.int().argmax(0) + 1  # steps of each env's first episode
    batch = ex.advantages(buf, args)
    mask = batch.loss_mask.reshape(buf.length, args.num_envs)
    assert mask.sum(0).tolist() == first_len.tolist() and batch.returns is None
    adv = batch.advantages.reshape(buf.length, args.num_envs)[0]
    for g in range(2):  # CartPole's score is the episode's length: against the group's mean, over its std
        s = first_len[4 * g : 4 * g + 4].float()
        torch.testing.assert_close(
            adv[4 * g : 4 * g + 4], (s - s.mean()) / (s.std() + 1e-6), rtol=0, atol=1e-4
        )


@pytest.mark.parametrize(
    "flags",
    [
        ["--adv-type", "gae", "--loss-type", "actor"],  # a critic nobody trains
        ["--adv-type", "grpo", "--loss-type", "actor", "--num-envs", "6", "--group-size", "4"],
        ["--adv-type", "rloo"],
        ["--whiten-advantages", "batch"],
        ["--value-clip-mode", "max"],
    ],
)
def test_bad_settings_exit_2_with_one_line(ex, flags, capsys):
    assert ex.main(flags) == 2
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 1 and out.startswith("error: "), out
