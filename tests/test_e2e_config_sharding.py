"""Config validation of a sharded actor (`cluster.component_placement` giving the actor several processes): the
combinations that cannot train sharded fail fast with one line naming the key; the working ones validate."""

from __future__ import annotations

import pytest

from train_embodied.cli import train_main
from train_embodied.config import ConfigError, load_train_config

TWO_ACTORS = "cluster.component_placement={env: 0, rollout: 0, actor: '0:0-1'}"
FSDP = ["hybrid_engines@actor.fsdp_config=fsdp"]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            [TWO_ACTORS, *FSDP],  # metaworld_ppo_tiny_cpu runs on the local backend
            "cluster.backend='local' is invalid: cluster.component_placement gives the actor 2 processes",
        ),
        (
            [TWO_ACTORS, "cluster.backend=ray"],  # the CPU config's hybrid_engines is `none`
            "actor.fsdp_config.strategy='none' is invalid: cluster.component_placement gives the actor 2 processes",
        ),
        (
            [TWO_ACTORS, "cluster.backend=ray", *FSDP, "actor.fsdp_config.sharding_strategy=hybrid_shard"],
            "actor.fsdp_config.sharding_strategy='hybrid_shard' is not supported with 2 actor processes",
        ),
    ],
)
def test_unshardable_actor_placements_fail_fast(overrides: list[str], expected: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        train_main(["metaworld_ppo_tiny_cpu", *overrides])
    assert exc.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vla-train: config error: ")
    assert expected in lines[0], lines


def test_both_rules_are_reported_together() -> None:
    with pytest.raises(ConfigError) as exc:
        load_train_config("metaworld_ppo_tiny_cpu", [TWO_ACTORS], check_paths=False)
    keys = sorted(e.split("=", 1)[0] for e in exc.value.errors)
    assert keys == ["actor.fsdp_config.strategy", "cluster.backend"]


@pytest.mark.parametrize("strategy", ["fsdp", "fsdp2"])
def test_sharded_and_single_process_configs_validate(strategy: str) -> None:
    sharded = [TWO_ACTORS, "cluster.backend=ray", *FSDP, f"actor.fsdp_config.strategy={strategy}"]
    tc = load_train_config("metaworld_ppo_tiny_cpu", sharded, check_paths=False)
    assert tc.actor.fsdp_config.strategy == strategy and tc.cluster.component_placement["actor"] == "0:0-1"
    # one actor process: any strategy is accepted (the actor then trains a plain, unsharded module)
    tc = load_train_config("metaworld_ppo_tiny_cpu", [*FSDP, f"actor.fsdp_config.strategy={strategy}"])
    assert tc.cluster.backend == "local"
