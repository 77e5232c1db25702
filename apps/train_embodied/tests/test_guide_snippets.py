"""The reference user guides' YAML snippets, command-line settings and commands compose here and mean what the
guides say.

The guides' facts are this repository's test data (`data/guide_facts.yaml`, see `guide_facts.py`); where the guides'
text is at hand (`VLA_GUIDES_DIR`), `test_guide_facts_are_the_guides_text` checks that the data is what the text
says. Each snippet is pasted into a config file that starts from the shipped config the guide is about, composed,
validated, and each of its settings is read back from the typed config at its home here
(`train_embodied.config.aliases` names the homes of the guides' spellings). A snippet that cannot apply here must
stop with one line, and is listed in `CANNOT_APPLY` with the reason.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from train_embodied.config import ConfigError, list_configs, load_train_config
from train_embodied.config.aliases import ENV_EXTRA_ALIASES

sys.path.insert(0, str(Path(__file__).parent))
import guide_facts

REPO = Path(__file__).resolve().parents[3]
FACTS = guide_facts.load_facts()
GUIDES = list(guide_facts.GUIDES)
#: The shipped config each guide's snippets are pasted into (the guide's own example config).
BASE_CONFIG = {
    "libero": "libero_10_grpo_openvlaoft",
    "maniskill": "maniskill_ppo_openvla",
    "metaworld": "metaworld_50_ppo_openpi",
    "overview": "maniskill_ppo_openvla",
    "robotwin": "robotwin_place_empty_cup_grpo_openvlaoft",
}
#: Snippets about one model go into that model's config: (guide, a setting of the snippet) -> config.
BASE_BY_SETTING = {
    ("robotwin", "actor.model.OpenPI.config_name=pi0_aloha_robotwin"): "robotwin_adjust_bottle_ppo_OpenPI",
    (
        "robotwin",
        "actor.model.OpenPI.config_name=pi05_aloha_robotwin",
    ): "robotwin_adjust_bottle_ppo_OpenPI_pi05",
}
OPENPI_CONFIG = "robotwin_adjust_bottle_ppo_OpenPI"
PI05_CONFIG = "robotwin_adjust_bottle_ppo_OpenPI_pi05"

#: (guide, setting) -> why it cannot apply here, and the start of the one line it stops with (none at present).
CANNOT_APPLY: dict[tuple[str, str], tuple[str, str]] = {}


def test_guide_facts_are_the_guides_text() -> None:
    """The test data is what the guides' text says (snippets, settings, commands, config files, metric names)."""
    folder = guide_facts.guides_dir()
    if folder is None:
        pytest.skip(guide_facts.GUIDES_NOT_SET)
    from_text = guide_facts.facts_from_guides(folder)
    for guide in GUIDES:
        for kind, facts in FACTS[guide].items():
            assert from_text[guide][kind] == facts, f"{guide} guide, {kind}: rewrite with guide_facts.py"
    assert from_text == FACTS


def test_require_all_accepts_exactly_the_guides_skip() -> None:
    """Under VLA_REQUIRE_ALL=1 the text check's skip where VLA_GUIDES_DIR is not set passes; any other skip fails."""
    spec = importlib.util.spec_from_file_location("root_conftest", REPO / "conftest.py")
    assert spec is not None and spec.loader is not None
    root_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(root_conftest)
    assert root_conftest._allowed(guide_facts.GUIDES_NOT_SET)
    assert not root_conftest._allowed(guide_facts.GUIDES_NOT_SET + " (and a broken install)")
    assert not root_conftest._allowed("the reference guides are not here")


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in ("component_placement",):
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


# ---- reading a setting back at its home here


def home_value(tc: Any, key: str) -> Any:
    """The value the typed config holds for the guide's `key`."""
    parts = key.split(".")
    if parts[0] == "rollout" and parts[1:] == ["model", "model_path"]:
        return tc.actor.model.model_path
    if parts[0] == "fsdp":
        return getattr(tc.actor.fsdp_config, parts[1])
    if parts[0] == "video_cfg":
        return getattr(tc.env_train.video, parts[1])
    if parts[0] == "trainer":
        wandb = tc.trainer.logger.wandb
        if parts[-1] == "enable":
            return "wandb" in tc.runner.logger.logger_backends
        return getattr(wandb, parts[-1])
    if parts == ["env", "enable_offload"]:  # both splits' env.<split>.enable_offload
        assert tc.train_run.enable_offload == tc.eval_run.enable_offload
        return tc.train_run.enable_offload
    if parts[0] == "env":
        env = tc.env_train if parts[1] == "train" else tc.env_eval
        run = tc.train_run if parts[1] == "train" else tc.eval_run
        rest = parts[2:]
        if rest[0] in ENV_EXTRA_ALIASES:
            rest = ["extra", *rest]
        if rest[0] == "video_cfg":
            rest = ["video", *rest[1:]]
        obj: Any = run if hasattr(run, rest[0]) else env
        for p in rest:
            obj = obj[p] if isinstance(obj, dict) else getattr(obj, p)
        return obj
    obj = tc
    for p in parts:
        obj = obj[p] if isinstance(obj, dict) else getattr(obj, p)
    return obj


def same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a == b
    if isinstance(a, str) and not isinstance(b, str):
        return a == str(b)
    return a == b


def compose_snippet(tmp_path: Path, base: str, snippet: dict[str, Any], overrides: list[str] = ()):
    body = dict(snippet)
    # a defaults list of the guide's (`env/train: NAME`) goes before the shipped config, whose own settings (GRPO
    # groups, ...) then apply on top, as they do on top of its own `env@env.train: NAME`
    defaults = [*body.pop("defaults", []), base, "_self_"]
    path = tmp_path / "user_config.yaml"
    path.write_text(yaml.safe_dump({"defaults": defaults, **body}, sort_keys=False))
    return load_train_config(str(path), list(overrides), check_paths=False)


def _base_for(guide: str, settings: dict[str, Any]) -> str:
    for (g, setting), config in BASE_BY_SETTING.items():
        key, value = setting.split("=", 1)
        if g == guide and str(settings.get(key)) == value:
            return config
    return BASE_CONFIG[guide]


def _resolved(value: Any, tc: Any) -> Any:
    """A `${runner.logger.log_path}` interpolation of the snippet (the guides' `video_base_dir`), as the composed
    config resolves it: the run's folder, where the guides' launcher puts log_path (config.load)."""
    if isinstance(value, str) and "${runner.logger.log_path}" in value:
        return value.replace("${runner.logger.log_path}", tc.runner.logger.log_dir)
    return value


@pytest.mark.parametrize("guide", GUIDES)
def test_every_snippet_composes_with_the_guides_meaning(guide: str, tmp_path: Path) -> None:
    snippets = FACTS[guide]["snippets"]
    assert snippets, f"no YAML snippet found in the {guide} guide"
    checked = 0
    for snippet in snippets:
        settings = flatten({k: v for k, v in snippet.items() if k != "defaults"})
        base = _base_for(guide, settings)
        tc = compose_snippet(tmp_path, base, snippet)
        for key, value in settings.items():
            if key.startswith("cluster.component_placement"):
                assert tc.cluster.component_placement == value, (guide, snippet)
            else:
                got = home_value(tc, key)
                assert same(got, _resolved(value, tc)), f"{guide}: {key}: {value!r} reads back as {got!r}"
            checked += 1
        for entry in snippet.get("defaults", []):  # `env/train: NAME` places the env option NAME
            ((group, name),) = entry.items()
            env = tc.env_train if group == "env/train" else tc.env_eval
            assert env.task == name.removeprefix("robotwin_"), (group, name, env.task)
    assert checked >= 3


@pytest.mark.parametrize("guide", GUIDES)
def test_every_prose_setting_composes_with_the_guides_meaning(guide: str) -> None:
    settings = [tuple(s) for s in FACTS[guide]["settings"]]
    if guide in ("libero", "maniskill", "metaworld", "overview"):
        assert settings == [], "these guides give settings only in snippets"
        return
    assert len(settings) >= 15
    for key, value, openpi in settings:
        base = BASE_CONFIG[guide]
        if openpi:
            base = PI05_CONFIG if "pi05" in value else OPENPI_CONFIG
        override = f"{key}={value}"
        reason = CANNOT_APPLY.get((guide, override))
        if reason is not None:
            with pytest.raises(ConfigError) as err:
                load_train_config(base, [override], check_paths=False)
            assert str(err.value).splitlines()[0].startswith(reason[1]), err.value
            continue
        tc = load_train_config(base, [override], check_paths=False)
        assert same(home_value(tc, key), yaml.safe_load(value)), f"{guide}: {override} in {base}"


def test_guides_commands_name_shipped_configs_and_launchers() -> None:
    names: set[str] = set()
    for guide in GUIDES:
        for script, name in FACTS[guide]["launchers"]:
            assert (REPO / "scripts" / script).is_file(), f"the {guide} guide's launcher {script}"
            if name != "CHOSEN_CONFIG":
                names.add(name)
        names.update(FACTS[guide]["config_files"])
    assert len(names) >= 14
    missing = sorted(names - set(list_configs()))
    assert not missing, f"configs the guides name that are not shipped: {missing}"
    for name in sorted(names):
        load_train_config(name, check_paths=False)


def test_env_group_syntax_selects_the_env_option(tmp_path: Path) -> None:
    """`env/train: NAME` / `env/eval: NAME` in a defaults list and `env/eval=NAME` on the command line place the env
    option NAME where `env@env.eval: NAME` does."""
    base = "robotwin_place_empty_cup_grpo_openvlaoft"
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"defaults": [base, {"env/eval": "robotwin_adjust_bottle_pi"}, "_self_"]}))
    by_file = load_train_config(str(path), check_paths=False)
    run = f"runner.logger.log_dir={tmp_path / 'run'}"
    by_override = load_train_config(base, ["env/eval=robotwin_adjust_bottle_pi", run], check_paths=False)
    ours = load_train_config(base, ["env@env.eval=robotwin_adjust_bottle_pi", run], check_paths=False)
    assert by_file.env_eval.task == by_override.env_eval.task == ours.env_eval.task == "adjust_bottle"
    assert by_override.env_eval == ours.env_eval
    for env in (by_file.env_eval, by_override.env_eval):  # the option's own settings
        assert env.extra["task_config"]["embodiment"] == ["aloha-agilex"]
        assert env.wrist_camera == "both"
    assert by_file.env_train.task == "place_empty_cup"
    with pytest.raises(
        ConfigError, match="unknown option 'env/no_such_env' for config group 'env'; available: "
    ):
        load_train_config(base, ["env/eval=no_such_env"], check_paths=False)


def test_wrist_camera_and_collect_wrist_camera_cannot_contradict() -> None:
    base = "robotwin_place_empty_cup_grpo_openvlaoft"  # collect_wrist_camera: false, no wrist camera
    with pytest.raises(ConfigError, match=r"env.train.wrist_camera='both' contradicts env.train.task_config"):
        load_train_config(base, ["env.train.wrist_camera=both"], check_paths=False)
    guide = load_train_config(
        base, ["env.train.task_config.camera.collect_wrist_camera=true"], check_paths=False
    )
    ours = load_train_config(
        base,
        ["env.train.wrist_camera=both", "env.train.task_config.camera.collect_wrist_camera=true"],
        check_paths=False,
    )
    from vla_envs.robotwin.options import resolve_options

    for tc in (guide, ours):  # the adapter reads one thing: both wrist cameras
        options = resolve_options(tc.env_train)
        assert options.wrist == "both" and options.task_config["camera"]["collect_wrist_camera"] is True


@pytest.mark.parametrize(
    ("theirs", "ours"),
    [
        ("rollout.model.model_path=/a", "actor.model.model_path=/b"),
        ("fsdp.gradient_checkpointing=true", "actor.fsdp_config.gradient_checkpointing=false"),
        ("video_cfg.save_video=true", "env.train.video_cfg.save_video=false"),
        ("env.eval.center_crop=false", "env.eval.extra.center_crop=true"),
    ],
)
def test_both_spellings_with_different_values_are_refused_naming_both(theirs: str, ours: str) -> None:
    base = "robotwin_place_empty_cup_grpo_openvlaoft"
    with pytest.raises(ConfigError) as err:
        load_train_config(base, [theirs, ours], check_paths=False)
    (line,) = err.value.errors
    assert theirs in line and ours in line and "they are one setting" in line


def test_both_spellings_with_one_value_are_one_setting() -> None:
    tc = load_train_config(
        "robotwin_place_empty_cup_grpo_openvlaoft",
        ["rollout.model.model_path=/a", "actor.model.model_path=/a", "fsdp.cpu_offload=true"],
        check_paths=False,
    )
    assert tc.actor.model.model_path == "/a" and tc.actor.fsdp_config.cpu_offload is True


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """`{"a.b": 1}` -> `{"a": {"b": 1}}`."""
    out: dict[str, Any] = {}
    for dotted, value in flat.items():
        node = out
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


@pytest.mark.parametrize(
    ("theirs", "ours", "values"),
    [
        ("rollout.model.model_path", "actor.model.model_path", ("/a", "/b")),
        ("fsdp.gradient_checkpointing", "actor.fsdp_config.gradient_checkpointing", (True, False)),
        ("video_cfg.fps", "env.train.video_cfg.fps", (10, 30)),
        ("env.eval.center_crop", "env.eval.extra.center_crop", (True, False)),
    ],
)
def test_both_spellings_with_different_values_in_one_file_are_refused_naming_both(
    theirs: str, ours: str, values: tuple[Any, Any], tmp_path: Path
) -> None:
    """Inside one config file the two spellings of a setting with different values are refused (composition would
    merge them and the documents' spelling would win silently); with one value they are one setting; the documents'
    spelling alone still applies over the config the file starts from."""
    base = "robotwin_place_empty_cup_grpo_openvlaoft"
    path = tmp_path / "mine.yaml"

    def load(settings: dict[str, Any]) -> Any:
        path.write_text(yaml.safe_dump({"defaults": [base, "_self_"], **_nest(settings)}))
        return load_train_config(str(path), check_paths=False)

    mine, other = values
    with pytest.raises(ConfigError) as err:
        load({theirs: mine, ours: other})
    assert err.value.errors == [
        f"{theirs}={mine!r} conflicts with {ours}={other!r} in {path}: they are one setting ({ours} is this "
        "project's name for it); give one of them"
    ]
    for settings in ({theirs: mine}, {theirs: mine, ours: mine}):
        assert same(home_value(load(settings), theirs), mine), settings


def test_env_group_size_in_a_file_is_algorithm_group_size(tmp_path: Path) -> None:
    base = "metaworld_grpo_tiny_cpu"  # algorithm.group_size: 4
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"defaults": [base, "_self_"], "env": {"train": {"group_size": 2}}}))
    with pytest.raises(ConfigError) as err:
        load_train_config(str(path), check_paths=False)
    assert err.value.errors == [
        "env.train.group_size=2 conflicts with algorithm.group_size=4: they are one setting (algorithm.group_size is "
        "this project's name for it: the envs of a group share a start state); give one of them"
    ]
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": [base, "_self_"],
                "env": {"train": {"group_size": 2}},
                "algorithm": {"group_size": 2},
            }
        )
    )
    tc = load_train_config(str(path), check_paths=False)
    assert tc.algorithm.group_size == tc.env_train.group_size == 2


def test_our_spelling_on_the_command_line_overrides_the_documents_spelling_in_a_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": ["metaworld_grpo_tiny_cpu", "_self_"],
                "fsdp": {"gradient_checkpointing": True},
                "env": {"train": {"group_size": 4}},
            }
        )
    )
    assert load_train_config(str(path), check_paths=False).actor.fsdp_config.gradient_checkpointing is True
    tc = load_train_config(
        str(path),
        ["actor.fsdp_config.gradient_checkpointing=false", "algorithm.group_size=2"],
        check_paths=False,
    )
    assert tc.actor.fsdp_config.gradient_checkpointing is False
    assert tc.algorithm.group_size == tc.env_train.group_size == 2
