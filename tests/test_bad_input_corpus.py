"""A corpus of malformed user input: each fails before anything is built with exactly one line on stderr that
names the key (or file), what was given and what is allowed, exit status 2, and no traceback.

Classes: config keys and values, YAML syntax, config files, config groups, env settings, run names and log
paths, resume folders (damaged, another model size, a file that is not what its name says, the pickle-based
format), model folders (missing files, bad JSON, checkpoint settings that contradict the config, a flipped byte,
a cut safetensors header, a relabelled dtype, NaN weights, a wrong tensor shape, a config.json of another model,
a manifest without checksums). A hostile pickle planted in any file of a run's checkpoint runs nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from train_embodied.cli import train_main

CONFIG = "metaworld_ppo_tiny_cpu"

# (case id, argv after the program name, text the one error line must contain); "{tmp}" is the corpus folder.
KEY_CASES = [
    ("unknown-key", [CONFIG, "runner.max_epoch=3"], "unknown config key 'runner.max_epoch'"),
    ("unknown-top-level-key", [CONFIG, "+optimizer.lr=1"], "unknown key 'optimizer'"),
    ("unknown-nested-key-added", [CONFIG, "+runner.foo=1"], "unknown key 'runner.foo'"),
    ("int-given-text", [CONFIG, "runner.max_epochs=abc"], "runner.max_epochs='abc' is invalid: expected int"),
    ("int-given-float", [CONFIG, "runner.seed=1.5"], "runner.seed=1.5 is invalid: expected int"),
    ("negative-seed", [CONFIG, "runner.seed=-1"], "runner.seed=-1 is invalid: must be >= 0"),
    (
        "float-given-text",
        [CONFIG, "algorithm.clip_ratio_low=abc"],
        "algorithm.clip_ratio_low='abc' is invalid",
    ),
    (
        "bool-given-text",
        [CONFIG, "runner.only_eval=maybe"],
        "runner.only_eval='maybe' is invalid: expected bool",
    ),
    ("choice", [CONFIG, "algorithm.adv_type=gea"], "algorithm.adv_type='gea' is not one of: gae, grpo"),
    ("range", [CONFIG, "algorithm.gamma=1.5"], "algorithm.gamma=1.5 is invalid: must be in [0.0, 1.0]"),
    ("logger-backend", [CONFIG, "runner.logger.logger_backends=[mlflow]"], "'mlflow' is not one of"),
    ("backend", [CONFIG, "cluster.backend=slurm"], "cluster.backend='slurm' is not one of: local, ray"),
    ("placement", [CONFIG, "cluster.component_placement={env: 0-99}"], "cluster.component_placement="),
    ("restarts", [CONFIG, "cluster.max_worker_restarts=-1"], "cluster.max_worker_restarts=-1 is invalid"),
    ("run-restarts", [CONFIG, "runner.max_restarts=-1"], "runner.max_restarts=-1 is invalid: must be >= 0"),
    (
        "worker-timeout-nan",
        [CONFIG, "cluster.worker_timeout_s=nan"],
        "cluster.worker_timeout_s=nan is invalid: must be a finite number",
    ),
    (
        "worker-timeout-zero",
        [CONFIG, "cluster.worker_timeout_s=0"],
        "cluster.worker_timeout_s=0.0 is invalid: must be a finite number of seconds > 0",
    ),
    (
        "worker-start-timeout-inf",
        [CONFIG, "cluster.worker_start_timeout_s=inf"],
        "cluster.worker_start_timeout_s=inf is invalid: must be a finite number",
    ),
    ("temperature", [CONFIG, "rollout.temperature=0"], "rollout.temperature=0.0 is invalid: must be > 0"),
    ("greedy-rollouts", [CONFIG, "rollout.do_sample=false"], "rollout.do_sample=False is not supported"),
    ("adam-betas", [CONFIG, "actor.optim.adam_betas=[0.9]"], "actor.optim.adam_betas=[0.9] is invalid"),
    (
        "lr-decay-style",
        [CONFIG, "actor.optim.lr_decay_style=step"],
        "actor.optim.lr_decay_style='step' is not one of: constant, linear, cosine",
    ),
    (
        "min-lr",
        [CONFIG, "actor.optim.min_lr=1"],
        "actor.optim.min_lr=1.0 is invalid: must be <= actor.optim.lr=",
    ),
    ("batch-multiple", [CONFIG, "actor.global_batch_size=17"], "actor.global_batch_size=17 is invalid"),
    (
        "model-extra-unknown",
        [CONFIG, "+actor.model.extra.prompt_lenght=20"],
        "actor.model.extra.prompt_lenght is not a field of OpenVLAOFTConfig; allowed: action_dim,",
    ),
    ("sft-lr", [CONFIG, "sft.lr=-1"], "sft.lr=-1.0 is invalid: must be > 0"),
    ("skip-limit", [CONFIG, "runner.max_consecutive_skipped_updates=0"], "max_consecutive_skipped_updates=0"),
    ("kl-beta", [CONFIG, "algorithm.kl_beta=-1"], "algorithm.kl_beta=-1.0 is invalid: must be >= 0.0"),
    ("nan-lr", [CONFIG, "actor.optim.lr=nan"], "actor.optim.lr=nan is invalid: must be a finite number"),
    ("inf-gamma", [CONFIG, "algorithm.gamma=inf"], "algorithm.gamma=inf is invalid: must be a finite number"),
    (
        "nan-worker-timeout",
        [CONFIG, "env.train.worker_timeout_s=nan"],
        "env.train.worker_timeout_s=nan is invalid: must be a finite number",
    ),
    ("section-given-scalar", [CONFIG, "actor.optim=5"], "actor.optim=5 is invalid: expected a section"),
    (
        "override-grammar",
        [CONFIG, "runner.max_epochs=[1,"],
        "'runner.max_epochs=[1,' is not an override Hydra",
    ),
    (
        "experiment-name-escapes",
        [CONFIG, "runner.logger.experiment_name=../../x"],
        "runner.logger.experiment_name='../../x' is invalid: a run name is one folder name",
    ),
    (
        "experiment-name-absolute",
        [CONFIG, "runner.logger.experiment_name=/etc"],
        "experiment_name='/etc' is invalid",
    ),
    (
        "log-path-under-a-file",
        [CONFIG, "runner.logger.log_path={tmp}/notes.txt/runs"],
        "notes.txt is not a folder",
    ),
    ("override-without-value", [CONFIG, "runner.max_epochs"], "Error parsing override 'runner.max_epochs'"),
]

#: Values Hydra's grammar cannot read unquoted (or reads as a sweep): each error line ends with the argument to
#: paste instead (`pass <argument>`), and `test_quoting_hints_work_when_pasted` pastes it.
QUOTING_CASES = [
    (
        "non-ascii",
        [CONFIG, "runner.logger.log_path={tmp}/café"],
        "pass \"runner.logger.log_path='{tmp}/café'\"",
    ),
    (
        "semicolon",
        [CONFIG, "runner.logger.log_path={tmp}/a;b"],
        "pass \"runner.logger.log_path='{tmp}/a;b'\"",
    ),
    (
        "parentheses",
        [CONFIG, "runner.logger.log_path={tmp}/a(b)"],
        "pass \"runner.logger.log_path='{tmp}/a(b)'",
    ),
    ("single-quote", [CONFIG, "runner.logger.log_path={tmp}/it's"], "is not an override Hydra can read"),
    ("comma-sweep", [CONFIG, "env.train.task=reach-v3,push-v3"], "a comma makes Hydra read a sweep"),
    (
        "comma-in-a-mapping-key",
        [CONFIG, "cluster.component_placement={env,rollout,actor: all}"],
        "pass 'cluster.component_placement={env\\,rollout\\,actor: all}'",
    ),
]

YAML_CASES = [
    ("unclosed-list", ["{tmp}/unclosed_list.yaml"], "unclosed_list.yaml:6:1: YAML syntax error"),
    ("bad-indent", ["{tmp}/bad_indent.yaml"], "bad_indent.yaml:6:8: YAML syntax error: mapping values"),
    ("tab", ["{tmp}/tab.yaml"], "tab.yaml:5:1: YAML syntax error: found character '\\t'"),
    ("unclosed-quote", ["{tmp}/unclosed_quote.yaml"], "unclosed_quote.yaml:6:1: YAML syntax error"),
    ("unclosed-mapping", ["{tmp}/unclosed_mapping.yaml"], "unclosed_mapping.yaml:5:1: YAML syntax error"),
    (
        "duplicate-key",
        ["{tmp}/duplicate_key.yaml"],
        "duplicate_key.yaml:6:3: YAML syntax error: found duplicate key",
    ),
    ("value-type-in-file", ["{tmp}/wrong_type.yaml"], "runner.max_epochs='many' is invalid: expected int"),
    ("alias-bomb", ["{tmp}/alias_bomb.yaml"], "alias_bomb.yaml: its YAML aliases expand to more than 100000"),
    (
        "alias-bomb-in-a-group-file",
        ["{tmp}/uses_bomb_env.yaml"],
        "env/bomb_env.yaml: its YAML aliases expand to more than 100000",
    ),
    ("nesting-too-deep", ["{tmp}/deep_nesting.yaml"], "deep_nesting.yaml: nests deeper than the YAML parser"),
]

FILE_CASES = [
    ("missing-file", ["{tmp}/nothere.yaml"], "config file '{tmp}/nothere.yaml' does not exist"),
    ("folder-as-config", ["{tmp}/a_folder"], "is a folder: give a .yaml file or a config name"),
    ("not-yaml", ["{tmp}/notes.txt"], "is not a .yaml/.yml file"),
    ("empty-file", ["{tmp}/empty.yaml"], "the config has no runner.logger section"),
    ("top-level-list", ["{tmp}/a_list.yaml"], "must be a DictConfig"),
    (
        "unknown-config-name",
        ["metaworld_ppo_tny_cpu"],
        "unknown config 'metaworld_ppo_tny_cpu': did you mean",
    ),
    ("missing-base-config", ["{tmp}/missing_base.yaml"], "Could not load 'nothere'"),
]

GROUP_CASES = [
    ("unknown-group-option", [CONFIG, "algorithm=ppx"], "unknown option 'algorithm/ppx' for config group"),
    (
        "unknown-env-option",
        [CONFIG, "env@env.train=nope"],
        "unknown option 'env/nope' for config group 'env'",
    ),
    ("unknown-group", [CONFIG, "+nogroup@env.train=foo"], "config group 'nogroup' does not exist"),
    (
        "unknown-option-in-file",
        ["{tmp}/bad_default.yaml"],
        "unknown option 'env/nope' for config group 'env'",
    ),
]

ENV_CASES = [
    ("env-type", [CONFIG, "env.train.env_type=metawrld"], "env.train.env_type='metawrld' is not one of:"),
    ("env-type-eval", [CONFIG, "env.eval.env_type=mujoco"], "env.eval.env_type='mujoco' is not one of:"),
    (
        "task",
        [CONFIG, "env.train.task=drawer-clos-v3"],
        "env.train.task='drawer-clos-v3' is not a metaworld task",
    ),
    ("task-set", [CONFIG, "env.train.task=null", "env.train.task_set=MT11"], "env.train.task_set='MT11'"),
    ("task-in-set", [CONFIG, "env.train.task=null", "env.train.task_set=[reach-v3,abc-v3]"], "['abc-v3']"),
    ("task-and-set", [CONFIG, "env.train.task_set=MT10"], "give either task or task_set, not both"),
    ("camera", [CONFIG, "env.train.camera=top"], "env.train.camera='top' is not a MetaWorld camera"),
    ("extra-key", [CONFIG, "env.train.extra={foo: 1}"], "env.train.extra has unknown keys ['foo']"),
    ("num-envs", [CONFIG, "env.train.num_envs=0"], "env.train.num_envs=0 is invalid: must be >= 1"),
    ("first-row", [CONFIG, "env.train.first_row=3"], "env.train.first_row=3 is invalid: the trainer sets"),
    (
        "metaworld-states",
        [CONFIG, "+env.eval.extra.states=goal"],
        "env.eval.extra['states']='goal' is invalid for env_type='metaworld': one of ['full', 'hand_goal']",
    ),
    (
        "metaworld-progress-reward",
        [CONFIG, "+env.train.extra.progress_reward=0.5", "env.train.reward_mode=dense"],
        "env.train.extra['progress_reward']=0.5 is invalid for env_type='metaworld': 0 with reward_mode='dense'",
    ),
    ("start-method", [CONFIG, "env.train.start_method=thread"], "env.train.start_method='thread' is invalid"),
    (
        "steps-type",
        [CONFIG, "env.train.max_episode_steps=abc"],
        "env.train.max_episode_steps='abc' is invalid",
    ),
    ("image-size", [CONFIG, "env.train.image_size=[64,abc]"], "env.train.image_size=[64, 'abc'] is invalid"),
    ("video-fps", [CONFIG, "env.eval.video_cfg.fps=0"], "env.eval.video_cfg.fps=0 is invalid: must be > 0"),
    ("video-key", [CONFIG, "+env.eval.video_cfg.codec=h264"], "unknown key 'env.eval.video_cfg.codec'"),
    (
        "group-size",
        [CONFIG, "env.train.num_envs=3", "algorithm.group_size=2"],
        "algorithm.group_size=2 is invalid: must divide env.train.num_envs=3",
    ),
    (
        "env-key",
        [CONFIG, "+env.train.num_env=4"],
        "unknown key 'env.train.num_env' (did you mean 'env.train.num_envs'?)",
    ),
]

RESUME_CASES = [
    (
        "resume-missing",
        [CONFIG, "runner.resume_dir={tmp}/gone"],
        "runner.resume_dir='{tmp}/gone' is invalid: no such",
    ),
    ("resume-file", [CONFIG, "runner.resume_dir={tmp}/notes.txt"], "a file, not a run folder"),
    ("resume-not-a-run", [CONFIG, "runner.resume_dir={tmp}/a_folder"], "not a run folder"),
    ("resume-interrupted", [CONFIG, "runner.resume_dir={tmp}/interrupted"], "no COMPLETE marker"),
    (
        "resume-truncated",
        [CONFIG, "runner.resume_dir={tmp}/truncated"],
        "model.safetensors is truncated or altered",
    ),
    (
        "resume-altered",
        [CONFIG, "runner.resume_dir={tmp}/altered/checkpoints/global_step_1"],
        "is altered: its sha256",
    ),
    (
        "resume-no-manifest",
        [CONFIG, "runner.resume_dir={tmp}/no_manifest"],
        "manifest.json is missing or unreadable",
    ),
    (
        "resume-other-model-size",
        [CONFIG, "runner.resume_dir={tmp}/wider"],
        "tensor action_queries has shape [4, 64], the policy actor.model describes has [4, 128]",
    ),
    (
        "resume-state-not-json",
        [CONFIG, "runner.resume_dir={tmp}/hostile_state"],
        "state/rank0.json is not a readable json file",
    ),
    ("resume-pickle-format", [CONFIG, "runner.resume_dir={tmp}/format_1"], "is in checkpoint format 1;"),
    (
        "resume-negative-iteration",
        [CONFIG, "runner.resume_dir={tmp}/negative_iteration"],
        "the trainer state's iteration=-3 is not a count (an int >= 0)",
    ),
    (
        "resume-text-iteration",
        [CONFIG, "runner.resume_dir={tmp}/text_iteration"],
        "the trainer state's iteration='three' is not a count",
    ),
    (
        "resume-past-max-epochs",
        [CONFIG, "runner.resume_dir={tmp}/past_the_end"],
        "was saved after iteration 999, past the 20 iterations this run trains (runner.max_epochs=20): nothing is "
        "left to train",
    ),
]

#: Run folders (`runner.logger.log_dir`) with a file of ours that is a link out of the folder (a resumed run would
#: overwrite the link's target), and folders a fresh run would write over (a model folder, a finished run).
LINKED_RUN_FILES = ("metrics.jsonl", "run.lock", "config.json", "summary.json", "policy")
RUN_FOLDER_CASES = [
    *[
        (
            f"run-folder-link-{name.replace('.', '-')}",
            [CONFIG, f"runner.logger.log_dir={{tmp}}/linked_{name}", "runner.resume_dir=auto"],
            f"{{tmp}}/linked_{name}/{name} is a link to {{tmp}}/outside/{name}, outside the run folder",
        )
        for name in LINKED_RUN_FILES
    ],
    (
        "video-folder-under-a-file",
        [
            CONFIG,
            "env.eval.video_cfg.save_video=true",
            "env.eval.video_cfg.video_base_dir={tmp}/notes.txt/videos",
        ],
        "env.eval.video_cfg.video_base_dir='{tmp}/notes.txt/videos' is invalid: {tmp}/notes.txt is not a folder",
    ),
    (
        "log-dir-is-a-model-folder",
        [CONFIG, "runner.logger.log_dir={tmp}/models/tiny"],
        "runner.logger.log_dir='{tmp}/models/tiny' is invalid: it is a model folder",
    ),
    (
        "log-dir-is-a-model-folder-even-resuming",
        [CONFIG, "runner.logger.log_dir={tmp}/models/tiny", "runner.resume_dir=auto"],
        "it is a model folder (config.json and weights), not a run folder",
    ),
    (
        "log-dir-is-a-finished-run",
        [CONFIG, "runner.logger.log_dir={tmp}/finished_run"],
        "runner.logger.log_dir='{tmp}/finished_run' is invalid: it already holds checkpoints, policy, and a fresh "
        "run would mix its files with those: to continue the run there set runner.resume_dir=auto",
    ),
]

#: Model folders (`actor.model.model_path`): missing files, config.json that is not JSON, shapes or settings that
#: contradict the config. Filled in with the model-folder checks.
MODEL = "actor.model.model_path={tmp}/models/"
MODEL_FOLDER_CASES = [
    ("model-config-not-json", [CONFIG, MODEL + "bad_json"], "config.json is not valid JSON"),
    ("model-config-not-object", [CONFIG, MODEL + "a_list"], "config.json does not hold a JSON object"),
    ("model-no-config", [CONFIG, MODEL + "no_config"], "config.json does not exist"),
    ("model-no-weights", [CONFIG, MODEL + "no_weights"], "neither model.safetensors.index.json nor"),
    ("model-index-not-json", [CONFIG, MODEL + "bad_index"], "model.safetensors.index.json is not valid JSON"),
    ("model-missing-shard", [CONFIG, MODEL + "missing_shard"], "model-00002-of-00002.safetensors (listed in"),
    (
        "model-action-dim-contradicts",
        [CONFIG, MODEL + "tiny", "actor.model.action_dim=7"],
        "action_dim=7 contradicts the checkpoint",
    ),
    (
        "model-proprio-contradicts",
        [CONFIG, MODEL + "tiny", "actor.model.proprio_dim=8"],
        "proprio_dim=8 contradicts the checkpoint",
    ),
    (
        "model-family-contradicts",
        [CONFIG, MODEL + "tiny", "actor.model.model_type=openvla", "actor.model.use_proprio=false"],
        "model_type='openvla' contradicts the checkpoint",
    ),
    (
        "model-width-contradicts",
        [CONFIG, MODEL + "tiny", "actor.model.extra.hidden_size=64"],
        "hidden_size=64 contradicts the checkpoint",
    ),
    ("model-flipped-byte", [CONFIG, MODEL + "flipped"], "is altered: its sha256 differs"),
    ("model-cut-header", [CONFIG, MODEL + "cut_header"], "is not a readable safetensors file"),
    (
        "model-relabelled-dtype",
        [CONFIG, MODEL + "relabelled"],
        "has dtype int32, config.json declares float32",
    ),
    ("model-nan-weights", [CONFIG, MODEL + "nan"], "tensor projector.fc1.bias holds 1 non-finite value(s)"),
    ("model-wrong-shape", [CONFIG, MODEL + "wrong_shape"], "tensor projector.fc1.bias has shape [3]"),
    (
        "model-other-family",
        [CONFIG, MODEL + "llama"],
        "is not a published OpenVLA config (no timm_model_ids / text_config; its model_type is 'llama')",
    ),
    ("model-manifest-without-checksums", [CONFIG, MODEL + "no_checksums"], "has no sha256 for"),
    ("model-config-too-deep", [CONFIG, MODEL + "deep_json"], "nests deeper than the JSON parser allows"),
    (
        "model-is-a-run-checkpoint",
        [CONFIG, "actor.model.model_path={tmp}/finished_run/checkpoints/global_step_1"],
        "is a run checkpoint (training state), not a policy folder: pass the run's policy folder, "
        "actor.model.model_path={tmp}/finished_run/policy",
    ),
    (
        "model-tokenizer-not-an-object",
        [CONFIG, MODEL + "bad_tokenizer"],
        "tokenizer.json holds a JSON array where a JSON object belongs",
    ),
]

CASES = (
    KEY_CASES
    + RUN_FOLDER_CASES
    + QUOTING_CASES
    + YAML_CASES
    + FILE_CASES
    + GROUP_CASES
    + ENV_CASES
    + RESUME_CASES
    + MODEL_FOLDER_CASES
)

BASE = "defaults:\n  - metaworld_ppo_tiny_cpu\n  - _self_\n"
FILES = {
    "unclosed_list.yaml": BASE + "runner:\n  max_epochs: [1, 2\n",
    "bad_indent.yaml": BASE + "runner:\n  max_epochs: 3\n   seed: 1\n",
    "tab.yaml": BASE + "runner:\n\tseed: 1\n",
    "unclosed_quote.yaml": BASE + 'runner:\n  seed: "1\n',
    "unclosed_mapping.yaml": BASE + "runner: {seed: 1\n",
    "duplicate_key.yaml": BASE + "runner:\n  seed: 1\n  seed: 2\n",
    "wrong_type.yaml": BASE + "runner:\n  max_epochs: many\n",
    "empty.yaml": "",
    "a_list.yaml": "[1, 2, 3]\n",
    "missing_base.yaml": "defaults:\n  - nothere\n  - _self_\n",
    "bad_default.yaml": "defaults:\n  - metaworld_ppo_tiny_cpu\n  - env@env.train: nope\n  - _self_\n",
    "notes.txt": "not a config\n",
    # ten levels of ten aliases: 10^10 leaves once expanded, in 12 lines
    "alias_bomb.yaml": BASE
    + "bomb:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10)),
    "uses_bomb_env.yaml": "defaults:\n  - metaworld_ppo_tiny_cpu\n  - override env@env.train: bomb_env\n  - _self_\n",
    "env/bomb_env.yaml": "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10)),
    "deep_nesting.yaml": BASE + "x: " + "[" * 50_000 + "]" * 50_000 + "\n",
}


def _checkpoint(run: Path, model: torch.nn.Module | None = None, trainer: dict | None = None) -> Path:
    from vla_infra.checkpoint import checkpoint_dir, save_checkpoint

    optimizer = torch.optim.AdamW(model.parameters()) if model is not None else None
    return save_checkpoint(
        checkpoint_dir(run / "checkpoints", 1),
        model if model is not None else {"w": torch.arange(64.0)},
        optimizer,
        trainer or {"step": 1, "epoch": 1},
    )


def _policy(*overrides: str) -> torch.nn.Module:
    from train_embodied.config import load_train_config
    from train_embodied.policy_io import model_config
    from vla_models import build_policy

    torch.manual_seed(0)
    return build_policy(
        model_config(load_train_config(CONFIG, list(overrides), check_paths=False).actor.model)
    )


def _reseal(ckpt: Path) -> None:
    """Rewrite a checkpoint's manifest for its current files (its checksums no longer catch a replaced file)."""
    manifest = json.loads((ckpt / "manifest.json").read_text())
    paths = [
        p for p in sorted(ckpt.rglob("*")) if p.is_file() and p.name not in ("manifest.json", "COMPLETE")
    ]
    manifest["files"] = {str(p.relative_to(ckpt)): p.stat().st_size for p in paths}
    manifest["sha256"] = {str(p.relative_to(ckpt)): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}
    (ckpt / "manifest.json").write_text(json.dumps(manifest))


class _Hostile:
    """Unpickling it creates the file `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("corpus")
    for name, text in FILES.items():
        (tmp / name).parent.mkdir(exist_ok=True)
        (tmp / name).write_text(text)
    (tmp / "a_folder" / "sub").mkdir(parents=True)
    (_checkpoint(tmp / "interrupted") / "COMPLETE").unlink()
    model = _checkpoint(tmp / "truncated") / "model.safetensors"
    model.write_bytes(model.read_bytes()[:-10])
    model = _checkpoint(tmp / "altered") / "model.safetensors"
    data = model.read_bytes()
    model.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    (_checkpoint(tmp / "no_manifest") / "manifest.json").unlink()
    _checkpoint(tmp / "wider", _policy("actor.model.extra.hidden_size=64"))
    state = _checkpoint(tmp / "hostile_state")
    (state / "state" / "rank0.json").write_bytes(pickle.dumps(_Hostile(tmp / "ran")))
    _reseal(state)
    old = _checkpoint(tmp / "format_1")
    manifest = json.loads((old / "manifest.json").read_text())
    (old / "manifest.json").write_text(json.dumps({**manifest, "format_version": 1}))
    _model_folders(tmp / "models")
    for name, iteration in (("negative_iteration", -3), ("text_iteration", "three"), ("past_the_end", 999)):
        _checkpoint(tmp / name, trainer={"step": 1, "iteration": iteration})
    _checkpoint(tmp / "finished_run", _policy())
    shutil.copytree(tmp / "models" / "tiny", tmp / "finished_run" / "policy")
    for name in LINKED_RUN_FILES:  # a run folder whose file `name` links to <tmp>/outside/<name>
        (tmp / "outside").mkdir(exist_ok=True)
        outside = tmp / "outside" / name
        if name == "policy":
            shutil.copytree(tmp / "models" / "tiny", outside)
        else:
            outside.write_text(f"{name}: a file of the user's that no run may change\n")
        (tmp / f"linked_{name}").mkdir()
        (tmp / f"linked_{name}" / name).symlink_to(outside)
    return tmp


def _model_folders(root: Path) -> None:
    """A tiny policy saved as the config describes it (action_dim 4, proprio_dim 4, hidden 128), and broken
    folders."""
    from train_embodied.config import load_train_config
    from train_embodied.policy_io import model_config
    from vla_models import build_policy

    build_policy(model_config(load_train_config(CONFIG, [], check_paths=False).actor.model)).save_pretrained(
        root / "tiny"
    )
    _damaged_model_folders(root)
    for name, files in {
        "bad_json": {"config.json": "{not json"},
        "a_list": {"config.json": "[1, 2]"},
        "no_config": {},
        "no_weights": {"config.json": "{}"},
        "bad_index": {"config.json": "{}", "model.safetensors.index.json": "{"},
        "missing_shard": {
            "config.json": "{}",
            "model.safetensors.index.json": '{"weight_map": {"a": "model-00002-of-00002.safetensors"}}',
        },
    }.items():
        (root / name).mkdir(parents=True)
        for file, text in files.items():
            (root / name / file).write_text(text)


def _damaged_model_folders(root: Path) -> None:
    """Copies of the tiny folder: with our manifest (a flipped byte; a manifest without checksums) and edited by
    hand, without it (a cut header, a relabelled dtype, NaN, a wrong shape); a Llama config.json."""
    from safetensors.torch import load_file, save_file

    tiny = root / "tiny"
    weights = next(tiny.glob("model-*.safetensors")).name

    def copy(name: str, keep_manifest: bool = False) -> Path:
        folder = Path(shutil.copytree(tiny, root / name))
        if not keep_manifest:
            (folder / "manifest.json").unlink()
        return folder

    (copy("deep_json") / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    (copy("bad_tokenizer") / "tokenizer.json").write_text("[1, 2]")
    flipped = copy("flipped", keep_manifest=True) / weights
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0x01
    flipped.write_bytes(bytes(data))
    folder = copy("no_checksums", keep_manifest=True)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"] = {rel: {"size": entry["size"]} for rel, entry in manifest["files"].items()}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    cut = copy("cut_header") / weights
    cut.write_bytes(cut.read_bytes()[:100])
    relabelled = copy("relabelled") / weights
    data = relabelled.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header["projector.fc1.weight"]["dtype"] = "I32"  # same bytes, read as integers
    text = json.dumps(header, separators=(",", ":")).encode()
    relabelled.write_bytes(data[:8] + text + b" " * (n - len(text)) + data[8 + n :])
    for name, edit in (("nan", "nan"), ("wrong_shape", "shape")):
        file = copy(name) / weights
        sd = load_file(str(file))
        if edit == "nan":
            sd["projector.fc1.bias"][0] = float("nan")
        else:
            sd["projector.fc1.bias"] = torch.zeros(3)
        save_file(sd, str(file))
    llama = root / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    )
    save_file({"model.embed_tokens.weight": torch.zeros(4, 2)}, str(llama / "model.safetensors"))


def test_a_hostile_pickle_in_a_run_checkpoint_runs_nothing(corpus: Path, tmp_path: Path, capsys) -> None:
    """Each file of a checkpoint of the tiny policy (weights, trainer, optimizer and RNG state) replaced by a
    pickle that would create a file, the manifest rewritten to match: `vla-train` refuses it with one line."""
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(_Hostile(tmp_path / "live")))  # the payload runs when unpickled
    assert (tmp_path / "live").exists()
    clean = _checkpoint(tmp_path / "clean", _policy())
    names = sorted(str(p.relative_to(clean)) for p in clean.rglob("*") if p.is_file())
    names = [n for n in names if n not in ("manifest.json", "COMPLETE")]
    assert len(names) == 5
    for name in names:
        run = tmp_path / name.replace("/", "_")
        shutil.copytree(clean.parent.parent, run)
        ckpt = run / "checkpoints" / "global_step_1"
        (ckpt / name).write_bytes(pickle.dumps(_Hostile(marker)))
        _reseal(ckpt)
        with pytest.raises(SystemExit) as info:
            train_main(
                [CONFIG, f"runner.resume_dir={run}", f"runner.logger.log_path={tmp_path}/runs", "--validate"]
            )
        err = capsys.readouterr().err.strip().splitlines()
        assert info.value.code == 2 and len(err) == 1 and name in err[0], err
        assert not marker.exists(), name
    # the untouched copy passes
    assert (
        train_main(
            [CONFIG, f"runner.resume_dir={clean}", f"runner.logger.log_path={tmp_path}/runs", "--validate"]
        )
        == 0
    )


def test_a_read_only_log_path_is_one_line(tmp_path: Path, capsys) -> None:
    """/sys is read-only even for root (where permission bits would not stop it)."""
    try:
        os.rmdir(__import__("tempfile").mkdtemp(dir="/sys"))
        pytest.skip("/sys is writable here")
    except OSError:
        pass
    with pytest.raises(SystemExit) as info:
        train_main([CONFIG, "runner.logger.log_path=/sys/vla_runs", "--validate"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(lines) == 1, lines
    assert "runner.logger.log_dir='/sys/vla_runs/" in lines[0] and "/sys is not writable" in lines[0]


def test_files_a_run_folder_links_to_stay_as_they_were(corpus: Path, capsys) -> None:
    """The real command (no --validate) on each run folder with a link out of it: one line, and the link's target
    (a file or folder of the user's) is byte for byte what it was."""

    def snapshot() -> dict[str, bytes]:
        root = corpus / "outside"
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    before = snapshot()
    for name in LINKED_RUN_FILES:
        with pytest.raises(SystemExit) as info:
            train_main([CONFIG, f"runner.logger.log_dir={corpus}/linked_{name}", "runner.resume_dir=auto"])
        err = capsys.readouterr().err.strip().splitlines()
        assert info.value.code == 2 and len(err) == 1 and f"linked_{name}/{name} is a link to" in err[0], err
        assert sorted(p.name for p in (corpus / f"linked_{name}").iterdir()) == [
            name
        ]  # nothing written beside
    assert snapshot() == before


def test_the_corpus_covers_every_class() -> None:
    assert len(CASES) >= 40
    assert len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize(("argv", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_fails_with_one_line(corpus: Path, argv: list[str], expected: str, capsys) -> None:
    argv = [a.replace("{tmp}", str(corpus)) for a in argv]
    expected = expected.replace("{tmp}", str(corpus))
    with pytest.raises(SystemExit) as info:
        train_main([*argv, "--validate"])  # --validate: an input that passed would not start a run
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert info.value.code == 2, captured.err
    assert len(lines) == 1, lines
    assert lines[0].startswith("vla-train: config error: ") and expected in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out


@pytest.mark.parametrize(
    "argv",
    [
        ["{tmp}/unclosed_list.yaml"],
        [CONFIG, "env.train.env_type=metawrld"],
        [CONFIG, "runner.resume_dir={tmp}/truncated"],
        [CONFIG, "runner.resume_dir={tmp}/wider"],
        [CONFIG, "actor.model.model_path={tmp}/models/flipped"],
    ],
    ids=["yaml", "env-type", "resume", "resume-other-model-size", "model-flipped-byte"],
)
def test_the_real_command_fails_fast_without_traceback(corpus: Path, argv: list[str]) -> None:
    """The installed entry point, no --validate: exit 2 and one line, before any simulator or model is built."""
    argv = [a.replace("{tmp}", str(corpus)) for a in argv]
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "train_embodied.cli", *argv, f"runner.logger.log_path={corpus}/runs"],
        capture_output=True, text=True, timeout=120, cwd=corpus,
    )  # fmt: skip
    if argv[0].endswith(".yaml"):  # the file's own YAML error comes before the override is applied
        assert "YAML syntax error" in proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (corpus / "runs").exists()  # nothing was started
    assert time.time() - t0 < 60


@pytest.mark.parametrize(
    ("argv", "expected"), [c[1:] for c in QUOTING_CASES], ids=[c[0] for c in QUOTING_CASES]
)
def test_quoting_hints_work_when_pasted(corpus: Path, argv: list[str], expected: str, capsys) -> None:
    """The argument a quoting error suggests, split as a POSIX shell splits it, sets the value as written."""
    import shlex

    argv = [a.replace("{tmp}", str(corpus)) for a in argv]
    with pytest.raises(SystemExit):
        train_main([*argv, "--validate"])
    line = capsys.readouterr().err.strip()
    pasted = shlex.split(line.split(" pass ", 1)[1].split(" for the string")[0])
    assert len(pasted) == 1, pasted
    key, value = argv[1].split("=", 1)
    try:  # --cfg prints the composed config: the value arrived as written
        code = train_main([argv[0], *pasted, "--cfg"])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    if key == "env.train.task":  # a string with a comma is no MetaWorld task: the value check speaks now
        assert f"env.train.task='{value}' is not a metaworld task" in out.err
        return
    assert code in (0, None) and not out.err, out.err
    import yaml

    composed = yaml.safe_load(out.out)
    node = composed
    for part in key.split("."):
        node = node[part]
    if key == "cluster.component_placement":
        assert node == {"env,rollout,actor": "all"}
    else:
        assert node == value


def test_vla_eval_given_a_run_checkpoint_names_the_policy_folder(corpus: Path, capsys) -> None:
    from train_embodied.cli import eval_main

    ckpt = corpus / "finished_run" / "checkpoints" / "global_step_1"
    with pytest.raises(SystemExit) as info:
        eval_main([CONFIG, f"actor.model.model_path={ckpt}", "--validate"])
    line = capsys.readouterr().err.strip()
    assert info.value.code == 2 and len(line.splitlines()) == 1
    assert f"pass the run's policy folder, actor.model.model_path={corpus}/finished_run/policy" in line
    assert eval_main([CONFIG, f"actor.model.model_path={corpus}/finished_run/policy", "--validate"]) == 0


def _without_root_file_access() -> list[str]:
    """A command prefix under which file permissions hold: root reads every file unless it drops the
    capabilities that bypass permission checks (util-linux's setpriv); other users need nothing."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


@pytest.mark.parametrize("what", ["config-file", "model-config", "model-weights"])
def test_an_unreadable_file_is_one_line(corpus: Path, tmp_path: Path, what: str) -> None:
    folder = tmp_path / "policy"
    shutil.copytree(corpus / "models" / "tiny", folder)
    config = tmp_path / "mine.yaml"
    config.write_text(BASE)
    target = {
        "config-file": config,
        "model-config": folder / "config.json",
        "model-weights": next(folder.glob("model-*.safetensors")),
    }[what]
    target.chmod(0)
    proc = subprocess.run(
        [*_without_root_file_access(), sys.executable, "-m", "train_embodied.cli", str(config),
         f"actor.model.model_path={folder}", "--validate"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{target.name}" in lines[0] and "cannot be read: Permission denied" in lines[0], lines[0]
