"""The base configs every shipped config starts from, generated from the typed sections: defaults have one home.

`common/embodied` (every top-level section) and `common/env_fields` (every `env.train` / `env.eval` key) are
built from the dataclass defaults of `train_embodied.config.sections` and `vla_envs.EnvConfig` and registered in
Hydra's config store, so every key can be overridden on the command line without `+`, and a YAML file sets only
what differs. Two values are the app's own, not the dataclasses': `env.*.video_cfg.video_base_dir` is null (the
run folder's `video/<train|eval>`), and mapping-valued keys start empty so that a config's mapping replaces
rather than extends them (an empty `cluster.component_placement` means every component on every slot); and
`env.*.group_size` is null: the train envs' same-start groups are `algorithm.group_size`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from train_embodied.config.sections import (
    ActorSection,
    AlgorithmSection,
    ClusterSection,
    EnvRunSection,
    RolloutSection,
    RunnerSection,
    SFTSection,
    TrainerSection,
)
from vla_envs import EnvConfig, VideoConfig


def field_defaults(cls: type) -> dict[str, Any]:
    """{field: default} of dataclass `cls`, nested dataclasses as dicts (mapping-valued fields start empty)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        value = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        if dataclasses.is_dataclass(value):
            value = field_defaults(type(value))
        elif isinstance(value, dict):
            value = {}
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


def env_defaults() -> dict[str, Any]:
    """Every key of an `env.train` / `env.eval` section with its default (`video_cfg` is EnvConfig.video)."""
    out = field_defaults(EnvConfig)
    video = out.pop("video")
    video["video_base_dir"] = None  # the run folder's video/<train|eval>, filled in by the app
    out["video_cfg"] = video
    out.update(field_defaults(EnvRunSection))
    # null: env.train's groups are algorithm.group_size's (train_embodied.config.aliases), env.eval's EnvConfig's
    out["group_size"] = None
    return out


def _unset(cls: type) -> dict[str, Any]:
    """Every field of dataclass `cls` as null (mapping-valued ones empty): a key that is only applied when set."""
    return {k: ({} if isinstance(v, dict) else None) for k, v in field_defaults(cls).items()}


def base_config() -> dict[str, Any]:
    """Every top-level section with its defaults (the groups env/, model/, algorithm/ then set what differs), and
    the reference documents' spellings of keys whose home is elsewhere (`train_embodied.config.aliases`), unset."""
    from train_embodied.config.sections import FSDPSection

    return {
        "cluster": field_defaults(ClusterSection),
        "runner": field_defaults(RunnerSection),
        "algorithm": {**field_defaults(AlgorithmSection), "eval_rollout_epoch": None},
        "env": {"train": env_defaults(), "eval": env_defaults(), "enable_offload": None},
        "rollout": {**field_defaults(RolloutSection), "model": {"model_path": None}},
        "actor": field_defaults(ActorSection),
        "sft": field_defaults(SFTSection),
        "trainer": field_defaults(TrainerSection),
        "fsdp": _unset(FSDPSection),
        "video_cfg": _unset(VideoConfig),
    }


def register_base_configs(env_options: list[str] = ()) -> None:
    """Store `common/embodied` and `common/env_fields` in Hydra's config store (idempotent), and for each option
    of the `env` group an `env/train/NAME` and `env/eval/NAME` that is that option: the reference documents' defaults
    list spelling (`- env/train: NAME`) places it at `env.train`, as `- env@env.train: NAME` does."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(group="common", name="embodied", node=base_config())
    store.store(group="common", name="env_fields", node=env_defaults())
    for name in env_options:
        for split in ("train", "eval"):
            store.store(group=f"env/{split}", name=name, node={"defaults": [f"/env/{name}@_here_", "_self_"]})
