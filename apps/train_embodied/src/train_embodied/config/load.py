"""Compose a config with Hydra: `CONFIG` is a name under the app's configs folder or a path to a YAML file.

Overrides use Hydra's grammar (`key=value`, `+key=value`, `group@pkg=option`, e.g.
`algorithm=grpo`, `env@env.train=metaworld_mt50`, `actor.model.model_path=/ckpt`).
"""

from __future__ import annotations

import datetime
import os
import re
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from train_embodied.config.aliases import FILE_ALIASES, file_conflicts, override_conflicts, rewrite_override
from train_embodied.config.build import ConfigError
from train_embodied.config.defaults import register_base_configs
from train_embodied.config.override_syntax import hydra_quoted, override_syntax_problems
from train_embodied.config.yaml_bounds import check_user_config

#: Mapping-valued keys an override replaces as a whole (Hydra would merge into the existing mapping, and refuse
#: new keys in it): `cluster.component_placement={env: 0-3, rollout: 4-7, actor: 0-7}` drops the config's
#: placement first; `env.train.extra={...}`, `actor.model.extra={...}`, `actor.fsdp_config.mixed_precision={...}`.
REPLACE_WHOLE = ("cluster.component_placement",)
REPLACE_WHOLE_NAMES = ("component_placement", "extra", "mixed_precision")


def _rewrite_overrides(overrides: list[str]) -> list[str]:
    out = []
    for item in map(rewrite_override, overrides):  # the reference documents' spellings -> ours
        key = item.split("=", 1)[0]
        whole = key in REPLACE_WHOLE or key.rsplit(".", 1)[-1] in REPLACE_WHOLE_NAMES
        if whole and not key.startswith(("+", "~")) and "=" in item:
            out += [f"~{key}", f"+{item}"]
        else:
            out.append(item)
    return out


def config_dir() -> Path:
    """The app's configs folder (inside the wheel, or `apps/train_embodied/configs` in a source checkout)."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "configs", here.parents[1] / "configs"):
        if (candidate / "env").is_dir():
            return candidate
    raise FileNotFoundError(f"train_embodied configs folder not found next to {here}")


def list_configs() -> list[str]:
    """Names of the top-level configs (what `vla-train NAME` accepts)."""
    return sorted(p.stem for p in config_dir().glob("*.yaml"))


def _resolve_config(config: str) -> tuple[Path, str, list[str]]:
    """(search dir, config name, extra overrides) for a config name or a YAML path."""
    path = Path(config)
    if path.suffix in (".yaml", ".yml") or os.sep in config:
        if path.is_dir():
            raise ConfigError([f"config file {config!r} is a folder: give a .yaml file or a config name"])
        if not path.is_file():
            raise ConfigError([f"config file {config!r} does not exist"])
        if path.suffix not in (".yaml", ".yml"):
            raise ConfigError([f"config file {config!r} is not a .yaml/.yml file"])
        try:
            path.open("rb").close()
        except OSError as exc:
            raise ConfigError([f"config file {config!r} cannot be read: {exc.strerror or exc}"]) from None
        # A user file can use the app's groups (env/, model/, algorithm/, common/): add them to the search path.
        searchpath = hydra_quoted(f"file://{config_dir()}")  # the install folder may hold spaces or commas
        return path.resolve().parent, path.stem, [f"hydra.searchpath=[{searchpath}]"]
    if config not in list_configs():
        import difflib

        close = difflib.get_close_matches(config, list_configs(), n=3)
        hint = f"did you mean: {', '.join(close)}; " if close else ""
        raise ConfigError(
            [f"unknown config {config!r}: {hint}available configs: {', '.join(list_configs())}"]
        )
    return config_dir(), config, []


def _explain_override_error(exc: Exception) -> str:
    text = str(exc).strip()
    m = re.search(r"Could not override '([^']+)'", text)
    if m:
        return (
            f"unknown config key '{m.group(1)}' (not in the composed config; "
            f"check the spelling or use '+{m.group(1)}=...' to add a new key)"
        )
    m = re.search(r"Could not find '([^']+)'", text)
    if m:
        group = m.group(1).split("/")[0]
        options = re.findall(r"^\t(\S+)$", text, flags=re.M)
        return f"unknown option '{m.group(1)}' for config group '{group}'; available: {', '.join(options)}"
    return text.splitlines()[0] if text else type(exc).__name__


def _explain_yaml_error(exc: yaml.YAMLError) -> str:
    """`file:line:column: YAML syntax error: <problem>` (1-based line and column, as editors count)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    what = f"{problem} ({context})" if context else str(problem)
    if mark is None:
        return f"YAML syntax error: {what}"
    return f"{mark.name}:{mark.line + 1}:{mark.column + 1}: YAML syntax error: {what}"


def compose_config(config: str, overrides: list[str] | None = None) -> DictConfig:
    """Compose `config` with `overrides` (Hydra grammar). Raises ConfigError with one line per problem."""
    search_dir, name, extra = _resolve_config(config)
    if extra:  # a user's files: bounded before Hydra copies their every node
        check_user_config(Path(config).resolve())
    conflicts = override_syntax_problems(list(overrides or [])) or override_conflicts(list(overrides or []))
    if conflicts:
        raise ConfigError(conflicts)
    register_base_configs(sorted(p.stem for p in (config_dir() / "env").glob("*.yaml")))
    try:
        with initialize_config_dir(config_dir=str(search_dir), version_base="1.3"):
            cfg = compose(config_name=name, overrides=[*extra, *_rewrite_overrides(list(overrides or []))])
    except (ConfigCompositionException, MissingConfigException) as exc:
        raise ConfigError([_explain_override_error(exc)]) from None
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError([f"cannot compose config {config!r}: {str(exc).splitlines()[0]}"]) from None
    except yaml.YAMLError as exc:  # a config file (the user's or a group option) that is not valid YAML
        raise ConfigError([_explain_yaml_error(exc)]) from None
    path = search_dir / (Path(config).name if extra else f"{name}.yaml")
    conflicts = file_conflicts(yaml.safe_load(path.read_text()) or {}, str(path))
    if conflicts:  # composition merged the two spellings silently: the documents' one would win
        raise ConfigError(conflicts)
    if extra and not any(o.lstrip("+~").startswith(REPLACE_WHOLE) for o in overrides or []):
        _replace_whole_from_file(cfg, search_dir / Path(config).name)
    _command_line_spelling_wins(cfg, list(overrides or []))
    return cfg


def _command_line_spelling_wins(cfg: DictConfig, overrides: list[str]) -> None:
    """A setting given on the command line in our spelling overrides the documents' spelling of it in the config
    files (which `apply_aliases` would otherwise apply over ours): that one is unset."""
    given = {rewrite_override(o).split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o}
    for theirs, ours in FILE_ALIASES:
        if ours in given and theirs not in given and OmegaConf.select(cfg, theirs) is not None:
            OmegaConf.update(cfg, theirs, None, force_add=True)


def _replace_whole_from_file(cfg: DictConfig, path: Path) -> None:
    """A user's config file that sets a `REPLACE_WHOLE` mapping (`cluster.component_placement`) replaces the one of
    the config it starts from, as the same key given on the command line does (Hydra would merge the two: the
    shipped `env,rollout,actor: all` beside the user's `env: 0-3` places env twice)."""
    data = yaml.safe_load(path.read_text()) or {}
    for key in REPLACE_WHOLE:
        node: object = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            OmegaConf.update(cfg, key, node, merge=False, force_add=True)


def assign_log_dir(cfg: DictConfig, *, now: datetime.datetime | None = None) -> str:
    """Fill `runner.logger.log_dir` = `log_path/experiment_name/<timestamp>` unless it is set; return it.

    With `runner.resume_dir=auto` it is the newest run folder of this experiment holding a checkpoint, if any,
    so that rerunning the command that crashed continues that run in its own folder."""
    from train_embodied.checkpointing import AUTO, find_run_to_resume

    logger = OmegaConf.select(cfg, "runner.logger")
    if not isinstance(logger, DictConfig) or "log_path" not in logger or "experiment_name" not in logger:
        raise ConfigError(
            [
                "the config has no runner.logger section (log_path, experiment_name): a config file starts from a "
                "shipped config, e.g. `defaults: [metaworld_ppo_tiny_cpu, _self_]` (vla-train --list names them)"
            ]
        )
    _video_dirs_in_run_folder(cfg)
    if logger.get("log_dir"):
        return str(logger.log_dir)
    previous = None
    if cfg.runner.get("resume_dir") == AUTO:
        previous = find_run_to_resume(str(logger.log_path), str(logger.experiment_name))
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    base = Path(str(logger.log_path)) / str(logger.experiment_name) / stamp
    run_dir, k = previous or base, 1
    while previous is None and run_dir.exists():
        run_dir = base.with_name(f"{stamp}-{k}")
        k += 1
    OmegaConf.set_struct(cfg, False)
    logger.log_dir = str(run_dir)
    OmegaConf.set_struct(cfg, True)
    return str(run_dir)


#: where a video folder may be set: each env section's and the documents' top-level `video_cfg`
VIDEO_DIR_KEYS = ("env.train.video_cfg", "env.eval.video_cfg", "video_cfg")


def _video_dirs_in_run_folder(cfg: DictConfig) -> None:
    """`${runner.logger.log_path}` in a `video_base_dir` means the run's folder (`runner.logger.log_dir`).

    The reference documents write `video_base_dir: ${runner.logger.log_path}/video/eval`: their launcher gives each
    run its own log_path, so the videos land with the run's logs. Here log_path is the root of every run folder
    (`log_path/experiment_name/<timestamp>`); taken literally, that line would mix the videos of every run in one
    folder outside them. The interpolation is rewritten before it resolves."""
    for key in VIDEO_DIR_KEYS:
        section = OmegaConf.select(cfg, key, default=None)
        if not isinstance(section, DictConfig) or "video_base_dir" not in section:
            continue
        raw = OmegaConf.to_container(section, resolve=False).get("video_base_dir")
        if isinstance(raw, str) and "${runner.logger.log_path}" in raw:
            section.video_base_dir = raw.replace("${runner.logger.log_path}", "${runner.logger.log_dir}")


def to_plain(cfg: DictConfig) -> dict[str, Any]:
    """Resolve interpolations and return plain containers; a missing mandatory value is a ConfigError."""
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None)
        msg = str(exc).splitlines()[0]
        raise ConfigError([f"{key}: {msg}" if key else msg]) from None
