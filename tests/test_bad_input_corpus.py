"""A corpus of malformed user input: each fails before anything is built with exactly one line on stderr that
names the key (or file), what was given and what is allowed, exit status 2, and no traceback.

Classes: config keys and values, YAML syntax, config files, config groups, env settings, resume folders, model
folders (missing files, bad JSON, checkpoint settings that contradict the config).
"""

from __future__ import annotations

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
    ("unknown-top-level-key", [CONFIG, "+trainer.lr=1"], "unknown key 'trainer'"),
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
    ("sft-lr", [CONFIG, "sft.lr=-1"], "sft.lr=-1.0 is invalid: must be > 0"),
    ("skip-limit", [CONFIG, "runner.max_consecutive_skipped_updates=0"], "max_consecutive_skipped_updates=0"),
    ("kl-beta", [CONFIG, "algorithm.kl_beta=-1"], "algorithm.kl_beta=-1.0 is invalid: must be >= 0.0"),
    ("section-given-scalar", [CONFIG, "actor.optim=5"], "actor.optim=5 is invalid: expected a section"),
    ("override-grammar", [CONFIG, "runner.max_epochs=[1,"], "cannot compose config"),
    ("override-without-value", [CONFIG, "runner.max_epochs"], "Error parsing override 'runner.max_epochs'"),
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
        [CONFIG, "env.train.num_envs=3", "env.train.group_size=2"],
        "env.train.group_size=2 is invalid",
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
]

CASES = KEY_CASES + YAML_CASES + FILE_CASES + GROUP_CASES + ENV_CASES + RESUME_CASES + MODEL_FOLDER_CASES

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
}


def _checkpoint(run: Path) -> Path:
    from vla_infra.checkpoint import checkpoint_dir, save_checkpoint

    return save_checkpoint(
        checkpoint_dir(run / "checkpoints", 1), {"w": torch.arange(64.0)}, None, {"step": 1}
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("corpus")
    for name, text in FILES.items():
        (tmp / name).write_text(text)
    (tmp / "a_folder" / "sub").mkdir(parents=True)
    (_checkpoint(tmp / "interrupted") / "COMPLETE").unlink()
    model = _checkpoint(tmp / "truncated") / "model.safetensors"
    model.write_bytes(model.read_bytes()[:-10])
    model = _checkpoint(tmp / "altered") / "model.safetensors"
    data = model.read_bytes()
    model.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    (_checkpoint(tmp / "no_manifest") / "manifest.json").unlink()
    _model_folders(tmp / "models")
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
    ],
    ids=["yaml", "env-type", "resume"],
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
