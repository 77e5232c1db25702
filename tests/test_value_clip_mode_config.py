"""`algorithm.value_clip_mode` reaches vla_algos' loss settings by name, and a value it does not know is refused."""

from __future__ import annotations

from train_embodied.config.convert import build_section
from train_embodied.config.sections import AlgorithmSection
from vla_algos import LossSettings


def _section(**keys) -> tuple[AlgorithmSection | None, list[str]]:
    errors: list[str] = []
    section = build_section(AlgorithmSection, keys, "algorithm", errors)
    return section, errors


def test_value_clip_mode_reaches_the_loss_settings():
    section, errors = _section(value_clip_mode="clipped")
    assert errors == [] and LossSettings.from_config(section).value_clip_mode == "clipped"
    default, _ = _section()
    assert LossSettings.from_config(default).value_clip_mode == "pessimistic"


def test_unknown_value_clip_mode_is_refused_with_one_line():
    _, errors = _section(value_clip_mode="max")
    assert len(errors) == 1 and errors[0].startswith("algorithm.value_clip_mode='max' is not one of"), errors
