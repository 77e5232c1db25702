"""Every fix a config error suggests works when pasted: each backquoted override (or shell command) of the line,
split as a POSIX shell splits it, added to the same command gets past that error.

The lines come from the real validation (`load_train_config`, what `vla-train` runs before anything starts). A
scan of the app's sources makes sure that every suggestion written there is exercised by a case here."""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from train_embodied.config import ConfigError, load_train_config
from train_embodied.testing import PPO_TINY

APP_SRC = Path(__file__).resolve().parents[1] / "apps" / "train_embodied" / "src" / "train_embodied"
TWO_ACTORS = "cluster.component_placement={env: 0, rollout: 0, actor: '0:0-1'}"
FSDP = "hybrid_engines@actor.fsdp_config=fsdp"

# name: (config, overrides that cause the error, environment variables, the start of the error line)
CASES: dict[str, tuple[str, list[str], dict[str, str], str]] = {
    "local_backend_nodes": (
        "metaworld_ppo_tiny_cpu", ["cluster.num_nodes=2"], {}, "cluster.backend='local' cannot use"
    ),
    "value_head": (
        "metaworld_ppo_tiny_cpu", ["actor.model.add_value_head=false"], {}, "actor.model.add_value_head=False"
    ),
    "group_auto_reset": (
        "metaworld_grpo_tiny_cpu", ["env.train.auto_reset=true"], {}, "env.train.auto_reset=True is invalid"
    ),
    "filter_auto_reset": (
        "metaworld_ppo_tiny_cpu",
        ["algorithm.filter_rewards=true", "algorithm.per_task_advantages=center", "env.train.auto_reset=true"],
        {},
        "env.train.auto_reset=True is invalid with algorithm.filter_rewards=true",
    ),
    "filter_per_task": (
        "metaworld_ppo_tiny_cpu",
        ["algorithm.filter_rewards=true", "algorithm.per_task_advantages=none", "env.train.auto_reset=false"],
        {},
        "algorithm.filter_rewards=True is invalid",
    ),
    "n_chunk_steps": ("metaworld_ppo_tiny_cpu", ["algorithm.n_chunk_steps=999"], {}, "algorithm.n_chunk_steps="),
    "critic_warmup": (
        "metaworld_grpo_tiny_cpu", ["algorithm.critic_warmup_epochs=2"], {}, "algorithm.critic_warmup_epochs="
    ),
    "sharded_local": (
        "metaworld_ppo_tiny_cpu", [TWO_ACTORS, FSDP], {}, "cluster.backend='local' is invalid"
    ),
    "sharded_no_fsdp": (
        "metaworld_ppo_tiny_cpu", [TWO_ACTORS, "cluster.backend=ray"], {}, "actor.fsdp_config.strategy='none'"
    ),
    "sharded_strategy": (
        "metaworld_ppo_tiny_cpu",
        [TWO_ACTORS, "cluster.backend=ray", FSDP, "actor.fsdp_config.sharding_strategy=hybrid_shard"],
        {},
        "actor.fsdp_config.sharding_strategy=",
    ),
    "gpus_on_cpu": ("maniskill_ppo_openvla", [], {}, "cluster.num_gpus_per_node="),
    "gpus_on_cpu_local": (
        "metaworld_ppo_tiny_cpu",
        ["cluster.num_gpus_per_node=2", "cluster.component_placement={env: 0, rollout: 0, actor: 1}"],
        {},
        "cluster.num_gpus_per_node=",
    ),
    "cpu_offload": ("metaworld_ppo_tiny_cpu", ["actor.fsdp_config.cpu_offload=true"], {}, "actor.fsdp_config.cpu_offload="),
    "param_dtype": (
        "metaworld_ppo_tiny_cpu", ["actor.model.precision=bf16"], {}, "actor.fsdp_config.mixed_precision.param_dtype="
    ),
    "wrist_camera": (
        "robotwin_ppo_tiny_cpu",
        ["env.train.wrist_camera=left", "+env.train.task_config.camera.collect_wrist_camera=false"],
        {},
        "env.train.wrist_camera='left' contradicts",
    ),
    "robot_platform_value": ("metaworld_ppo_tiny_cpu", [], {"ROBOT_PLATFORM": "FRANKA"}, "ROBOT_PLATFORM="),
    "robot_platform_conflict": (
        "libero_10_grpo_openvlaoft",
        ["+actor.model.extra.normalization_type=bounds_q99"],
        {"ROBOT_PLATFORM": "ALOHA"},
        "actor.model.extra.normalization_type=",
    ),
}  # fmt: skip


def _errors(
    config: str, overrides: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """The config error lines of `vla-train config overrides` under environment `env` ([] when it is valid)."""
    with monkeypatch.context() as m:
        m.delenv("ROBOT_PLATFORM", raising=False)
        for key, value in env.items():
            if value is None:
                m.delenv(key, raising=False)
            else:
                m.setenv(key, value)
        try:
            load_train_config(config, overrides)  # checks against this machine too, as vla-train does
        except ConfigError as exc:
            return list(exc.errors)
    return []


def hints(line: str) -> list[str]:
    """The backquoted suggestions of an error line: each one an alternative fix."""
    return re.findall(r"`([^`]+)`", line)


def _paste(hint: str, overrides: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The command line after pasting `hint`: overrides added, or the shell command `unset NAME` / `export K=V`
    applied to the environment."""
    words = shlex.split(hint)
    if words[0] == "unset":
        return overrides, {**env, **dict.fromkeys(words[1:])}
    if words[0] == "export":
        return overrides, {**env, **dict(w.split("=", 1) for w in words[1:])}
    assert all("=" in w or w.startswith("~") for w in words), hint
    return [*overrides, *words], env


@pytest.mark.parametrize("name", list(CASES))
def test_each_suggested_fix_gets_past_its_error(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    config, overrides, env, start = CASES[name]
    lines = [line for line in _errors(config, overrides, env, monkeypatch) if line.startswith(start)]
    assert len(lines) == 1, _errors(config, overrides, env, monkeypatch)
    suggestions = hints(lines[0])
    assert suggestions, lines[0]
    for hint in suggestions:
        new_overrides, new_env = _paste(hint, overrides, env)
        after = _errors(config, new_overrides, new_env, monkeypatch)
        assert not [line for line in after if line.startswith(start)], (hint, after)


def _source_hints() -> list[str]:
    """Backquoted `key=value` / shell suggestions written in the app's error messages, with each `{...}` field of
    an f-string as a wildcard."""
    found = []
    for path in APP_SRC.rglob("*.py"):
        if path.name == "testing.py":  # the tests' budgets, not messages
            continue
        for literal in re.findall(r'(?:f?"(?:[^"\\\n]|\\.)*")', path.read_text()):
            for hint in re.findall(r"(?:set|run|or|with|,) `([^`]+)`", literal):  # suggestions, not mentions
                if re.search(r"\w=|^unset |^~", hint) and not hint.startswith(("{", "vla-", "python")):
                    found.append(re.sub(r"\{[^}]*\}", "*", hint))
    return sorted(set(found))


def test_every_suggestion_in_the_sources_is_pasted_by_a_case(monkeypatch: pytest.MonkeyPatch) -> None:
    pasted = set()
    for config, overrides, env, start in CASES.values():
        for line in _errors(config, overrides, env, monkeypatch):
            if line.startswith(start):
                pasted.update(hints(line))
    written = _source_hints()
    assert len(written) >= 10, written  # the scan finds them
    unmatched = [
        w for w in written if not any(fnmatch.fnmatchcase(p, w.replace("\\\\", "\\")) for p in pasted)
    ]
    assert not unmatched, (unmatched, sorted(pasted))


def test_the_cpu_placement_hint_pasted_into_a_shell_runs(tmp_path: Path) -> None:
    """The GPU-config-on-a-CPU line as a user meets it: the command, the suggestion pasted after it, run by bash."""
    train = Path(sys.executable).with_name("vla-train")
    first = subprocess.run(
        [train, "maniskill_ppo_openvla", f"runner.logger.log_path={tmp_path}", "--validate"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    line = next(line for line in first.stderr.splitlines() if "cluster.num_gpus_per_node=" in line)
    hint = hints(line)[0]
    assert "component_placement={env\\,rollout\\,actor: all}" in hint
    command = (
        f"{shlex.quote(str(train))} maniskill_ppo_openvla runner.logger.log_path={tmp_path} --validate {hint}"
    )
    second = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=600)
    assert "cluster.num_gpus_per_node=" not in second.stderr and "Traceback" not in second.stderr, (
        second.stderr
    )
    assert "component_placement" not in second.stderr, second.stderr


def test_did_you_mean_suggestions_name_what_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    """A misspelled key, task or config name: the suggested name, used instead, is accepted."""
    (line,) = _errors("metaworld_ppo_tiny_cpu", ["+runner.max_epoch=3"], {}, monkeypatch)
    key = re.search(r"did you mean '([^']+)'", line).group(1)
    assert _errors("metaworld_ppo_tiny_cpu", [f"{key}=3"], {}, monkeypatch) == []
    (line,) = _errors("metaworld_ppo_tiny_cpu", [*PPO_TINY, "env.train.task=drawer-clos-v3"], {}, monkeypatch)
    task = re.search(r"did you mean: ([\w-]+)", line).group(1)
    assert _errors("metaworld_ppo_tiny_cpu", [*PPO_TINY, f"env.train.task={task}"], {}, monkeypatch) == []
    with pytest.raises(ConfigError) as info:
        load_train_config("metaworld_ppo_tiny", [], check_paths=False)
    name = re.search(r"did you mean: ([\w-]+)", info.value.errors[0]).group(1)
    load_train_config(name, [], check_paths=False)
