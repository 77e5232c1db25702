"""Preflight: every check of what a run reads from disk before it starts, run once by the command line after the
config is valid and before any worker, simulator or model is built. Each problem is one line naming the key.

A check is a function `(tc) -> list of problem lines` about one thing the run reads:

- `run_folder_problems`: the run folder (`runner.logger.log_dir`) can be created and written;
- `run_folder_contents_problems`: no link in it leads out of it, and it holds no model and no other run's files
  unless this run resumes there;
- `video_folder_problems`: the folders episode videos go to can be created and written;
- `resume_problems`: the checkpoint `runner.resume_dir` resumes from exists, is complete and intact, holds no file
  that is not what its name says, and fits the policy `actor.model` describes;
- `model_folder_problems`: the folder `actor.model.model_path` loads (a small one is loaded once here).

A command runs the checks of what it reads (`TRAIN_CHECKS`, `SFT_CHECKS`); a further check is one more function in
them.
Every check runs, so the user sees every problem at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from train_embodied.checkpointing import ResumeError, resume_checkpoint
from train_embodied.config.sections import ModelSection
from train_embodied.config.train_config import TrainConfig
from train_embodied.policy_io import build_policy_for_run, load_settings, model_config
from train_embodied.run_folder import folder_problem, link_problem, occupied_problem
from train_embodied.run_state import RunState
from vla_infra import (
    COMPLETE_MARKER,
    MODEL_FILE,
    CheckpointError,
    checkpoint_tensor_shapes,
    read_trainer_state,
)
from vla_models import build_policy, check_checkpoint

#: model folders with at most this many bytes of weights are loaded once by the preflight
FULL_CHECK_BYTES = 512 * 1024**2

Check = Callable[[TrainConfig], list[str]]


def run_folder_problems(tc: TrainConfig) -> list[str]:
    """One line if the run could not create or write its folder (`run_folder.folder_problem`)."""
    problem = folder_problem(tc.log_dir)
    return [problem] if problem else []


def run_folder_contents_problems(tc: TrainConfig) -> list[str]:
    """One line each: a link in the run folder that leads out of it (`run_folder.link_problem`); a folder that
    holds a model or another run's files when this run does not resume there (`run_folder.occupied_problem`)."""
    resume_dir = None if tc.runner.only_eval else tc.runner.resume_dir
    found = (link_problem(tc.log_dir), occupied_problem(tc.log_dir, resume_dir))
    return [problem for problem in found if problem]


def video_folder_problems(tc: TrainConfig) -> list[str]:
    """One line per env whose `video_cfg.save_video` is on and whose `video_base_dir` could not be created or
    written (`run_folder.folder_problem`)."""
    envs = [("env.eval", tc.env_eval)] + ([] if tc.runner.only_eval else [("env.train", tc.env_train)])
    run = Path(tc.log_dir).absolute()
    found = [
        folder_problem(env.video.video_base_dir, key=f"{split}.video_cfg.video_base_dir")
        for split, env in envs
        if env.video.save_video
        and env.video.video_base_dir
        and not Path(env.video.video_base_dir).absolute().is_relative_to(run)  # the run folder's own check
    ]
    return [problem for problem in found if problem]


def resume_problems(tc: TrainConfig) -> list[str]:
    """One line per problem of the checkpoint `runner.resume_dir` resumes from (none for a fresh start or an
    evaluation): no usable checkpoint, an unreadable file, or (a policy built from `actor.model` settings, no
    `model_path`) a tensor whose shape differs from the policy's. The policy is built on the meta device: no memory,
    no weights."""
    resume_dir = tc.runner.resume_dir
    if not resume_dir or tc.runner.only_eval:
        return []
    try:
        found = resume_checkpoint(resume_dir, tc.log_dir, skipped=[])  # the run prints what it passes over
        if found is None:
            return []
        shapes = checkpoint_tensor_shapes(found)
    except (ResumeError, CheckpointError) as exc:
        text = str(exc)
        return [
            text if text.startswith("runner.resume_dir=") else f"runner.resume_dir={resume_dir!r}: {text}"
        ]
    try:
        done = RunState.from_dict(read_trainer_state(found)).iteration
    except (CheckpointError, ValueError) as exc:
        return [f"runner.resume_dir={resume_dir!r}: {found}: {exc}"]
    if done > tc.runner.num_iterations:
        return [
            f"runner.resume_dir={resume_dir!r}: {found} was saved after iteration {done}, past the "
            f"{tc.runner.num_iterations} iterations this run trains ({_length_keys(tc.runner)}): nothing is left to "
            "train; raise runner.max_epochs to train on"
        ]
    expected = _policy_shapes(tc.actor.model)
    for name, shape in sorted(shapes.items()):
        if name in expected and expected[name] != shape:
            return [
                f"runner.resume_dir={resume_dir!r}: {found / 'model.safetensors'} tensor {name} has shape {shape}, "
                f"the policy actor.model describes has {expected[name]} (a checkpoint of another model size)"
            ]
    return []


def model_folder_problems(tc: TrainConfig) -> list[str]:
    """One line if `actor.model.model_path` would fail to load: no such folder; its small files contradict the
    `actor.model` settings (malformed JSON, missing weights, another saved architecture; no tensor is read); or, for
    a folder whose weights total at most `FULL_CHECK_BYTES`, loading it once (every check of
    `vla_models.load_policy`: checksums, dtypes, shapes, NaN/inf). A larger folder gets the rest of those checks
    when the actor loads it."""
    section = tc.actor.model
    path = section.model_path
    if not path:
        return []
    if not Path(path).is_dir():
        return [
            f"actor.model.model_path={path!r} is invalid: no such folder "
            "(a folder written by save_pretrained, e.g. the vla-sft output)"
        ]
    if problem := run_checkpoint_given(Path(path)):
        return [problem]
    problem = _saved_files_problem(section) or _load_problem(section)
    return [f"actor.model.model_path={path!r} is invalid: {problem}"] if problem else []


#: What each command reads before it starts: `vla-train` / `vla-eval` the run folder (and what is in it), the resume
#: checkpoint and the model folder; `vla-sft` (a policy built from scratch) the run folder and the resume checkpoint.
TRAIN_CHECKS: tuple[Check, ...] = (
    run_folder_problems,
    run_folder_contents_problems,
    video_folder_problems,
    resume_problems,
    model_folder_problems,
)
SFT_CHECKS: tuple[Check, ...] = (run_folder_problems, resume_problems)


def preflight(tc: TrainConfig, checks: Sequence[Check] = TRAIN_CHECKS) -> list[str]:
    """Every problem `checks` find for the run `tc` describes, one line each, in the order of `checks`."""
    return [line for check in checks for line in check(tc)]


def run_checkpoint_given(path: Path) -> str | None:
    """One line when `model_path` is a run checkpoint (`<run>/checkpoints/global_step_N`: training state, no
    config.json) rather than a policy folder, naming the folder to pass instead."""
    if (path / "config.json").exists() or not (
        (path / COMPLETE_MARKER).is_file() and (path / MODEL_FILE).is_file()
    ):
        return None
    run = path.parent.parent if path.parent.name == "checkpoints" else None
    policy = run / "policy" if run is not None and (run / "policy" / "config.json").is_file() else None
    fix = (
        f"pass the run's policy folder, actor.model.model_path={policy}"
        if policy is not None
        else "pass a policy folder (a run writes <run folder>/policy when it finishes)"
    )
    return (
        f"actor.model.model_path={str(path)!r} is a run checkpoint (training state), not a policy folder: {fix}; "
        f"to train on from this checkpoint, set runner.resume_dir={path} instead"
    )


def _length_keys(runner: Any) -> str:
    """The settings that fix a run's length, as `key=value`."""
    keys = f"runner.max_epochs={runner.max_epochs}"
    return keys + (f", runner.max_steps={runner.max_steps}" if runner.max_steps >= 0 else "")


def _saved_files_problem(section: ModelSection) -> str | None:
    """The model folder's small files against the `actor.model` settings (`vla_models.check_checkpoint`)."""
    try:
        check_checkpoint(section.model_path, **load_settings(section))
    except (ValueError, FileNotFoundError) as exc:
        return str(exc)
    return None


def _load_problem(section: ModelSection) -> str | None:
    """Why the model folder fails to load, for a folder of at most `FULL_CHECK_BYTES` of weights (else None)."""
    size = sum(f.stat().st_size for f in Path(section.model_path).glob("*.safetensors") if f.is_file())
    if size > FULL_CHECK_BYTES:
        return None
    try:
        with torch.random.fork_rng(devices=[]):  # a fresh value head draws: keep the run's streams
            build_policy_for_run(section, None)
    except (ValueError, FileNotFoundError, OSError) as exc:
        return " ".join(str(exc).split()).removeprefix("actor.model: ")
    return None


def _policy_shapes(section: ModelSection) -> dict[str, list[int]]:
    """Tensor shapes of the policy a run builds from `section` (empty when it loads `model_path`: the folder's
    own checks apply)."""
    if section.model_path:
        return {}
    with torch.device("meta"):
        policy = build_policy(model_config(section, None))
    return {name: list(t.shape) for name, t in policy.state_dict().items()}
