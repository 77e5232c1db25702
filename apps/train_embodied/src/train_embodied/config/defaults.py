"""The base configs every shipped config starts from, generated from the typed sections: defaults have one home.

`common/embodied` (every top-level section) and `common/env_fields` (every `env.train` / `env.eval` key) are
built from the dataclass defaults of `train_embodied.config.sections` and `vla_envs.EnvConfig` and registered in
Hydra's config store, so every key can be overridden on the command line without `+`, and a YAML file sets only
what differs. Two values are the app's own, not the dataclasses': `env.*.video_cfg.video_base_dir` is null (the
run folder's `video/<train|eval>`), and mapping-valued keys start empty so that a config's mapping replaces
rather than extends them (an empty `cluster.component_placement` means every component on every slot).
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
)
from vla_envs import EnvConfig


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
    return out


def base_config() -> dict[str, Any]:
    """Every top-level section with its defaults (the groups env/, model/, algorithm/ then set what differs)."""
    return {
        "cluster": field_defaults(ClusterSection),
        "runner": field_defaults(RunnerSection),
        "algorithm": field_defaults(AlgorithmSection),
        "env": {"train": env_defaults(), "eval": env_defaults()},
        "rollout": field_defaults(RolloutSection),
        "actor": field_defaults(ActorSection),
        "sft": field_defaults(SFTSection),
    }


def register_base_configs() -> None:
    """Store `common/embodied` and `common/env_fields` in Hydra's config store (idempotent)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(group="common", name="embodied", node=base_config())
    store.store(group="common", name="env_fields", node=env_defaults())
