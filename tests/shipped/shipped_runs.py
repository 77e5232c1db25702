"""What the shipped-config tests share: every shipped config (`vla-train --list`) trains one iteration on the CPU, as
shipped except for sizes (`test_shipped_<family>.py`, one file per env family so that test workers spread them).

What is shrunk, and nothing else: the model becomes the tiny model of the same family (`actor.model.size=tiny`,
no checkpoint, fp32, 32 px, 64 hidden), envs / episodes / steps / batch sizes / group size get small, GPUs
become CPU slots (the same component layout on processes of one CPU node; the local backend), and simulators
with a GPU backend use their CPU one. Algorithm, LoRA, value head, chunking, action dims, offload, pipeline
stages, video and logging settings stay as shipped (GRPO's reward filter is switched off: a random policy's
all-fail groups would all be dropped before the update). MetaWorld, ManiSkill3 and LIBERO run their real CPU
simulators. RoboTwin runs its real code from the environment of `scripts/setup_robotwin.sh`, on a task that
environment can build without RoboTwin's downloaded assets (the config's own, else `stack_blocks_two`, with the
stand-in robot), as the tiny model stands in for the checkpoint: chunking, 14-D actions, proprio and the algorithm stay as shipped. This catches what validation cannot: shape mismatches between a family and an env, batch joins
across env ranks and pipeline stages, settings that break at run time.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from train_embodied.config import list_configs, load_train_config
from train_embodied.testing import read_metrics, run_train

# Cases marked `long` run only with VLA_LONG_TESTS=1 in scripts/test.sh, which keeps the default run near 25 minutes
# on 2 cores. LIBERO's configs start robosuite and build its scenes: 195-245 s per config on 2 cores, close to the
# suite's 300 s hang guard, which one more job on the machine pushes past (LIBERO itself is tested in
# packages/vla-envs/tests/test_libero_env.py on every run). The RoboTwin `_eval` configs evaluate the policy and env of
# their training twins, whose runs end with that evaluation (evaluation-only mode runs in the MetaWorld `_eval`
# configs); RoboTwin's GRPO config (85 s) adds group sampling, which the MetaWorld GRPO configs run, to the RoboTwin
# adapter, which the RoboTwin PPO configs run and whose equal starts for equal ids (what a group needs)
# packages/vla-envs/tests/test_robotwin_real.py checks. The four GPU-size ManiSkill configs run the reference's
# PutOnPlateInScene25 task code on the stand-in assets: a 640 x 480 render and 100 physics steps per env step,
# 225-1060 s per config on 2 shared cores at load 8-20 (the task itself is tested on every run in
# packages/vla-envs/tests/test_maniskill_put_on_plate.py); the tiny CPU config renders its camera at a quarter size
# and runs on every run (72 s on 2 idle cores). Config name -> its hang guard (s).
LONG = {
    "libero_10_grpo_openvlaoft": 900,
    "libero_10_ppo_openvlaoft": 900,
    "libero_grpo_tiny_cpu": 900,
    "libero_ppo_pi0_tiny_cpu": 900,
    "libero_ppo_tiny_cpu": 900,
    "maniskill_grpo_openvla": 1200,
    "maniskill_grpo_openvlaoft": 1800,
    "maniskill_ppo_openvla": 1200,
    "maniskill_ppo_openvlaoft": 1200,
    "robotwin_adjust_bottle_ppo_OpenPI_eval": 300,
    "robotwin_adjust_bottle_ppo_OpenPI_pi05_eval": 300,
    "robotwin_place_empty_cup_grpo_openvlaoft": 300,
}
# The other LIBERO suites' configs are libero_10_grpo_openvlaoft on another task set (and its evaluation-only
# twin): their composition is tested in apps/train_embodied/tests/test_libero_suite_configs.py, their run is libero_10's.
LIBERO_SUITE_TWINS = {
    name
    for name in list_configs()
    if name.startswith("libero_")
    and name not in LONG
    and name.endswith(("_grpo_openvlaoft", "_grpo_openvlaoft_eval"))
}
#: The env families, one test file each (`test_shipped_<family>.py`): a config's family is its name's first word.
FAMILIES = ("libero", "maniskill", "metaworld", "robotwin")


def shipped(family: str) -> list[Any]:
    """The shipped configs of `family` that train one iteration, as test parameters (`long` ones marked)."""
    return [
        pytest.param(name, marks=[pytest.mark.long, pytest.mark.timeout(LONG[name])])
        if name in LONG
        else name
        for name in list_configs()
        if name not in LIBERO_SUITE_TWINS and name.split("_", 1)[0] == family
    ]


ROBOTWIN_VENV = Path(
    os.environ.get("ROBOTWIN_VENV") or Path(__file__).resolve().parents[2] / ".venv-robotwin"
)
# The RoboTwin tasks the stand-in asset roots of scripts/setup_robotwin.sh build without RoboTwin's downloaded
# assets; a config on another task runs on the first.
ROBOTWIN_CPU_TASKS = ("stack_blocks_two", "blocks_ranking_rgb", "handover_block", "press_stapler")
ROBOTWIN_ASSET_ROOTS = ("robotwin-assets", "robotwin-assets-lowpoly")


def _robotwin_overrides(section: str, env: Any) -> list[str]:
    """Run env.<section> on RoboTwin's real code in its own environment, on a task and asset root the stand-in
    builds (the section's own when it can)."""
    if not (ROBOTWIN_VENV / ".robotwin-ready").is_file():
        pytest.skip(
            f"no RoboTwin environment at {ROBOTWIN_VENV}: build it with `bash scripts/setup_robotwin.sh`"
        )
    key = f"env.{section}"
    task = env.task if env.task in ROBOTWIN_CPU_TASKS else ROBOTWIN_CPU_TASKS[0]
    root = Path(str(env.extra.get("assets_path") or "")).name
    root = root if root in ROBOTWIN_ASSET_ROOTS else ROBOTWIN_ASSET_ROOTS[0]
    return [
        f"{key}.task={task}",
        f"++{key}.extra.task_config.task_name={task}",
        f"++{key}.extra.robotwin_python={ROBOTWIN_VENV / 'bin/python'}",
        f"++{key}.extra.assets_path={ROBOTWIN_VENV / root}",
        f"++{key}.extra.camera_shader=default",  # ray tracing takes minutes per frame on a CPU renderer
        f"++{key}.extra.seeds_path=null",
        f"++{key}.extra.task_config.embodiment=[piper, piper, 0.6]",  # the stand-in robot's slot
        f"++{key}.extra.task_config.domain_randomization="
        "{random_background: false, cluttered_table: false, random_light: false}",
    ]


def _maniskill_overrides(section: str) -> list[str]:
    """Run a PutOnPlateInScene25 section on the reference's task code (package rlinf) with the stand-in assets of
    scripts/maniskill_standin_assets.py (written once per machine; the script leaves an up-to-date pack alone)."""
    import importlib.util
    import subprocess
    import sys
    import tempfile

    if importlib.util.find_spec("rlinf") is None:
        pytest.skip("the PutOnPlateInScene25 task code is not installed (pip install --no-deps rlinf==0.3.0)")
    pack = Path(tempfile.gettempdir()) / f"vla-maniskill-standin-{os.getuid()}"
    script = Path(__file__).resolve().parents[2] / "scripts" / "maniskill_standin_assets.py"
    subprocess.run([sys.executable, str(script), "--out", str(pack)], check=True, timeout=300)
    return [f"++env.{section}.extra.asset_dir={pack}"]


def _cpu_placement(placement: dict[str, Any]) -> str:
    """The shipped component layout on CPU slots (processes of node 0): a component spread over several GPUs
    gets 2 processes, one on a single GPU 1; the actor gets 1 (a sharded actor needs the Ray backend, covered by
    tests/test_e2e_train_fsdp.py)."""
    parts = []
    for key, value in placement.items():
        several = str(value) == "all" or "-" in str(value) or "," in str(value)
        for name in (k.strip() for k in str(key).split(",")):
            parts.append(f"{name}: 0" if name == "actor" or not several else f"{name}: '0:0-1'")
    return "cluster.component_placement={" + ", ".join(parts) + "}"


def shrunk_overrides(name: str) -> list[str]:
    """Hydra overrides that shrink shipped config `name` to a one-iteration CPU run (see module docstring)."""
    tc = load_train_config(name, [], check_paths=False)
    model, algo, train = tc.actor.model, tc.algorithm, tc.env_train
    chunks = model.num_action_chunks
    grouped = algo.adv_type == "grpo"
    group = 2 if grouped else 1
    stages = tc.rollout.pipeline_stage_num
    num_envs = 2 * group * stages  # 2 per stage (2 groups with GRPO): every env rank gets rows
    decisions = 2
    out = [
        "actor.model.size=tiny",
        "actor.model.model_path=null",
        "actor.model.precision=fp32",
        # compute at the model's precision too: a narrower param_dtype runs the actor's forward under autocast
        # while the rollout computes in fp32, and the first minibatch's ratio check below compares the two
        "++actor.fsdp_config.mixed_precision.param_dtype=fp32",
        "actor.model.unnorm_key=null",  # action statistics come with a checkpoint; the tiny model has none
        "actor.model.image_size=32",
        "++actor.model.extra.patch_size=16",
        "cluster.num_gpus_per_node=0",
        "cluster.backend=local",
        _cpu_placement(dict(tc.cluster.component_placement)),
        "runner.max_epochs=1",
        "runner.val_check_interval=-1",
        "runner.eval_before_train=false",  # the evaluation after the iteration covers the eval path
        "runner.progress_bar=false",
        "runner.torch_num_threads=1",
        f"env.train.num_envs={num_envs}",
        f"env.train.max_steps_per_rollout_epoch={decisions * chunks}",
        f"env.train.max_episode_steps={decisions * chunks}",
        f"env.eval.num_envs={2 * stages if tc.env_eval.num_envs % 2 == 0 else 1}",
        "env.eval.num_episodes=2",
        f"env.eval.max_episode_steps={chunks}",
        f"actor.micro_batch_size={max(1, num_envs // 2)}",
        f"actor.global_batch_size={num_envs}",
    ]
    if model.model_type == "openpi":  # the tiny size has no named preset: keep the config's chunk
        out.append(f"++actor.model.openpi.action_horizon={chunks}")
        out.append("++actor.model.openpi.max_token_len=128")  # the CPU RoboTwin task's long instructions
    else:  # the OpenVLA families' tiny widths (pi0's tiny size fixes its own)
        out += [
            "++actor.model.extra.hidden_size=64",
            # the prompt width as shipped: the batch's longest prompt unless the config fixes one, so tasks with
            # instructions of different lengths on different ranks, stages and decisions are joined as shipped
            f"++actor.model.extra.prompt_length={model.extra.get('prompt_length') or 'null'}",
        ]
    for section, env in (("train", train), ("eval", tc.env_eval)):
        if not (env.env_type == "robotwin" and env.extra.get("center_crop") is False):  # native frame only
            out.append(f"env.{section}.image_size=32")
    for section, env, rows in (("train", train, num_envs // stages), ("eval", tc.env_eval, 2 * stages)):
        if env.envs_per_worker > 0:  # one simulator process per env rank (2 ranks)
            out.append(f"env.{section}.envs_per_worker={max(1, rows // 2)}")
        if env.extra.get("sim_backend") == "gpu":
            out.append(f"env.{section}.extra.sim_backend=cpu")
    if grouped:
        out += [f"algorithm.group_size={group}", f"env.train.group_size={group}"]
        # the one setting that is not a size: a random tiny policy fails every episode, and the filter would
        # drop all its groups before the update (whose shapes this test is about)
        out.append("algorithm.filter_rewards=false")
    for section, env in (("train", train), ("eval", tc.env_eval)):
        if env.env_type == "robotwin":
            out += _robotwin_overrides(section, env)
        if env.env_type == "maniskill" and str(env.task or "").startswith("PutOnPlateInScene25"):
            out += _maniskill_overrides(section)
    if "metaworld" in train.env_type and train.num_trials_per_task > 1000:
        out.append("env.train.num_trials_per_task=1000")
    return out


def train_one_iteration_and_check(name: str, tmp_path: Path) -> None:
    """Run shipped config `name` shrunk (`shrunk_overrides`) for one iteration and check its metrics and saved
    config (an `_eval` config: that it evaluated and did not train)."""
    overrides = shrunk_overrides(name)
    summary = run_train(name, overrides, tmp_path / "run")
    rows = read_metrics(tmp_path / "run")
    if load_train_config(name, [], check_paths=False).runner.only_eval:  # an `_eval` config: evaluation only
        assert not any("train/actor/policy_loss" in r for r in rows)
        assert any("eval/success_once" in r for r in rows), rows
        return
    assert summary["epochs"] == 1 and summary["env_steps"] > 0
    train = [r for r in rows if "train/actor/policy_loss" in r]
    assert len(train) == 1, rows
    row = train[0]
    assert math.isfinite(row["train/actor/policy_loss"]) and row["train/actor/num_samples"] > 0
    assert row["train/actor/first_minibatch_approx_kl"] < 1e-4  # rollout and actor computed the same policy
    tc = load_train_config(name, [*overrides, f"runner.logger.log_dir={tmp_path / 'run'}"])
    if tc.algorithm.loss_type == "actor_critic":
        assert math.isfinite(row["train/critic/value_loss"])
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["algorithm"]["adv_type"] == tc.algorithm.adv_type
    assert "eval/success_once" in rows[-1] or "eval/success_once" in summary.get("history", [{}])[-1]


def _libero_fixed_starts(name: str) -> bool:
    """Whether LIBERO config `name` trains on LIBERO's 50 fixed initial states (not its sampled starts)."""
    return (
        load_train_config(name, [], check_paths=False).env_train.extra.get("init_states", "fixed") == "fixed"
    )


# Configs whose evaluation shares starts with training on purpose, with the reason. ManiSkill PutOnPlateInScene25Main:
# training draws every episode id of obj_set=train and the guides' in-distribution table evaluates on those scenes
# (their held-out table is env@env.eval=maniskill_put_on_plate_25_ood, other objects); the tiny CPU config holds its
# evaluation starts out. LIBERO on its fixed initial states: every suite has 50 per task, and the guide evaluates
# "every combination of task_id and trial_id" after training on them (a config on LIBERO's sampled starts is checked
# like any other).
SHARED_STARTS = {
    name: reason
    for name in list_configs()
    for reason in [
        "ManiSkill PutOnPlateInScene25Main: the guides' in-distribution table evaluates the training episode ids"
        if name.startswith("maniskill_") and not name.endswith("_tiny_cpu")
        else "LIBERO: 50 fixed initial states per task, trained and evaluated as in the guide"
        if name.startswith("libero_") and _libero_fixed_starts(name)
        else None
    ]
    if reason is not None
}


def start_keys(tc: Any, split: str) -> set[tuple[Any, ...]]:
    """The starts a section can use, computed from the config (no simulator): training draws trials uniformly from
    [0, num_trials_per_task) of each task; evaluation episode k runs task k % T at trial trial_offset + k // T
    (train_embodied.evaluation). A start is what the adapter builds from a (task, trial): MetaWorld seeds the task's
    variation with the trial alone (vla_envs.metaworld.sim.trial_rng); RoboTwin runs seed seed_base + trial (or the
    trial's entry of a seed list); LIBERO's sampled starts seed its start sampler with (task, trial)
    (vla_envs.libero.sim.placement_seed)."""
    import numpy as np

    env = tc.env_train if split == "train" else tc.env_eval
    if env.env_type == "metaworld":
        from vla_envs.metaworld.tasks import resolve_tasks

        tasks, _ = resolve_tasks(env.task, env.task_set)
        start = lambda task, trial: ("metaworld", task, trial)  # noqa: E731
    elif env.env_type == "robotwin":
        from vla_envs.robotwin.options import resolve_options

        opts = resolve_options(env)
        tasks = [opts.task]
        assert opts.seeds is None, "a seed list: compare the lists' entries"
        start = lambda task, trial: ("robotwin", task, opts.seed_base + trial)  # noqa: E731
    elif env.env_type == "libero" and env.extra.get("init_states") == "sampled":
        from vla_envs.libero.suites import resolve_tasks as resolve_libero_tasks

        tasks = [t.name for t in resolve_libero_tasks(env.task, env.task_set)]
        start = lambda task, trial: ("libero", task, trial)  # noqa: E731
    elif env.env_type == "maniskill" and env.task == "PutOnPlateInScene25Main-v3":
        from vla_envs.maniskill.put_on_plate import episode_ids

        # a trial's start is the task episode id it draws (carrot, overlay, placement, turn); 802,816 ids with
        # obj_set=train (16 carrots x 16 overlays x 784 placements x 4 turns)
        assert env.extra.get("obj_set", "train") == "train", "count the ids of this obj_set"
        tasks = [env.task]
        n_trials = env.num_trials_per_task
        start = lambda task, trial: ("maniskill", task, int(episode_ids([trial], n_trials, 802_816)[0]))  # noqa: E731
    else:
        pytest.fail(f"no start rule for env_type {env.env_type!r}: add one (or a SHARED_STARTS reason)")
    if split == "train":
        return {start(t, trial) for t in tasks for trial in range(env.num_trials_per_task)}
    k = np.arange(tc.eval_run.num_episodes)
    return {start(tasks[i % len(tasks)], tc.eval_run.trial_offset + i // len(tasks)) for i in k.tolist()}
