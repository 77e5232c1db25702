"""The configuration reference (docs/reference/configuration.md) is complete and current: every config field has
its sentence where it is defined, every key of the base config has a home, and the page is what
`scripts/config_reference.py` writes from the config code now."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import config_reference  # noqa: E402


@pytest.fixture(scope="module")
def generated() -> tuple[list, list[str], list[str]]:
    return config_reference.sections()


def test_every_field_has_a_sentence_and_every_key_a_home(generated) -> None:
    _, _, problems = generated
    assert not problems, "\n".join(problems)


def test_every_key_of_the_base_config_is_on_the_page(generated) -> None:
    from train_embodied.config.defaults import base_config

    found, alias_only, _ = generated
    keys = {row.key for section in found for row in section.rows} | set(alias_only)
    leaves = set(config_reference._leaves(base_config()))
    assert leaves <= keys, sorted(leaves - keys)
    # the sections cover every field of their homes (nested sections are sections of their own)
    for section in found:
        for cls in section.homes:
            names = {f.name for f in dataclasses.fields(cls) if f.init}
            nested = {
                n
                for n, tp in config_reference.field_types(cls).items()
                if config_reference._section_class(tp)
            }
            assert len(names - nested) <= len(section.rows), (section.path, cls)


def test_allowed_values_come_from_the_validation(generated) -> None:
    found, _, _ = generated
    rows = {row.key: row for section in found for row in section.rows}
    assert rows["algorithm.adv_type"].allowed.startswith("one of: gae, grpo")
    assert rows["runner.max_steps"].allowed == "must be >= 0 (or -1)"
    assert rows["algorithm.gamma"].allowed == "must be in [0.0, 1.0]"
    assert rows["env.train.reward_mode"].allowed == "one of ('sparse', 'dense')"
    assert rows["runner.logger.logger_backends"].allowed == "one of: tensorboard, console, wandb, swanlab"
    assert rows["runner.eval_greedy"].allowed == "true, false"


def test_the_page_is_current() -> None:
    """The script's own check, in a fresh interpreter: the page lists the registries as a user's process has them,
    without the test adapters other tests of this process registered."""
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "config_reference.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
