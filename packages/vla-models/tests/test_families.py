"""The model-family registry: a family registered from outside is found, built, saved and loaded through the
shared entry points; unknown names are one-line errors; the shared code imports no family module."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
import torch

import vla_models
from vla_models import (
    OpenVLAConfig,
    OpenVLAPolicy,
    build_policy,
    config_from_dict,
    families,
    family_names,
    get_family,
    load_policy,
    prismatic_family,
    register_family,
    unregister_family,
)

SRC = Path(vla_models.__file__).resolve().parent


@dataclass(kw_only=True)
class ToyConfig(OpenVLAConfig):
    """OpenVLA under another family name, with one more field (saved and loaded with the rest)."""

    family: ClassVar[str] = "toy_vla"
    toy_width: int = 16


class ToyPolicy(OpenVLAPolicy):
    pass


@pytest.fixture
def toy_family():
    family = register_family(prismatic_family("toy_vla", config=ToyConfig, policy=ToyPolicy))
    try:
        yield family
    finally:
        unregister_family("toy_vla")
    assert "toy_vla" not in family_names()


def test_a_registered_family_is_found_built_saved_and_loaded(toy_family, tmp_path, make_obs_fn) -> None:
    assert get_family("toy_vla") is toy_family and toy_family in families()
    assert family_names() == ("openpi", "openvla", "openvla_oft", "toy_vla")
    cfg = config_from_dict(
        {"model_type": "toy_vla", "size": "tiny", "toy_width": 8, "value_head_hidden_sizes": (8,)}
    )
    assert type(cfg) is ToyConfig and cfg.toy_width == 8
    policy = build_policy(cfg, add_value_head=True)
    assert type(policy) is ToyPolicy and policy.config.add_value_head
    out = policy.predict(make_obs_fn(2), mode="greedy")
    assert out.actions.shape == (2, 1, 7) and out.values.shape == (2,)
    policy.save_pretrained(str(tmp_path))
    assert json.loads((tmp_path / "config.json").read_text())["vla_models"]["family"] == "toy_vla"
    loaded = load_policy(tmp_path)  # found by its saved family, no model_type given
    assert type(loaded) is ToyPolicy and loaded.config.toy_width == 8
    logp, _, values = loaded.evaluate(out.forward_inputs)
    assert torch.equal(logp, out.logprobs) and torch.equal(values, out.values)
    # an explicit model_type of another family contradicts the folder
    with pytest.raises(ValueError, match="model_type='openvla' contradicts"):
        load_policy(tmp_path, model_type="openvla")


def test_the_same_name_twice_is_refused(toy_family) -> None:
    with pytest.raises(ValueError, match="'toy_vla' is already registered"):
        register_family(prismatic_family("toy_vla", config=ToyConfig, policy=ToyPolicy))


def test_an_unknown_family_is_a_one_line_error_naming_the_known_ones(tmp_path) -> None:
    for call in (
        lambda: get_family("pi7"),
        lambda: config_from_dict({"model_type": "pi7", "size": "tiny"}),
        lambda: load_policy(tmp_path, model_type="pi7"),
    ):
        with pytest.raises(ValueError) as exc:
            call()
        assert (
            str(exc.value)
            == "model_type='pi7' is not a known model family; known: openpi, openvla, openvla_oft"
        )
    (tmp_path / "config.json").write_text(json.dumps({"vla_models": {"family": "pi7"}}))
    with pytest.raises(
        ValueError, match=r"unknown model family 'pi7' in .*config.json; allowed: openpi, openvla"
    ):
        load_policy(tmp_path)


def test_every_built_in_family_declares_its_parts() -> None:
    for family in families():
        assert family.config_class.family == family.name
        assert issubclass(family.policy_class, torch.nn.Module)
        assert family.fsdp_wrap_classes and family.checkpoint_layouts and family.settings_keys
    assert get_family("openvla_oft").saved_config_defaults == {"implement_version": "causal_prefix"}
    assert not get_family("openpi").fixed_image_size


def _imported_modules(path: Path) -> list[str]:
    """Every module an ``import`` / ``from ... import`` anywhere in the file names (functions included)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return names


FAMILY_MODULES = ("vla_models.openvla", "vla_models.openvla_oft", "vla_models.openpi", "vla_models.family_")


@pytest.mark.parametrize(
    "shared",
    [
        "prismatic/policy_prismatic.py",
        "prismatic/checkpoint_prismatic.py",
        "prismatic/openvla_folder.py",
        "checkpoint.py",
        "checkpoint_files.py",
        "checkpoint_settings.py",
        "forward_inputs.py",
        "factory.py",
        "families.py",
    ],
)
def test_the_shared_code_imports_no_family_module(shared: str) -> None:
    found = [m for m in _imported_modules(SRC / shared) if m.startswith(FAMILY_MODULES)]
    assert found == [], f"{shared} imports family modules {found}"


def test_the_scan_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    f = tmp_path / "x.py"
    f.write_text("def g():\n    from vla_models.openvla_oft.action_head import L1RegressionActionHead\n")
    assert any(m.startswith(FAMILY_MODULES) for m in _imported_modules(f))


def test_importing_the_package_and_listing_families_imports_no_model_code() -> None:
    code = (
        "import sys, vla_models; names = vla_models.family_names(); "
        "vla_models.get_family('openvla_oft').check_settings({'action_head': 'x', 'extra': {'y': 1}}, 'm.'); "
        "print(names, [m for m in ('torch', 'transformers', 'vla_models.prismatic.policy_prismatic') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "('openpi', 'openvla', 'openvla_oft') []", out.stderr


def test_a_folder_is_read_by_the_family_whose_layout_it_holds(tmp_path: Path) -> None:
    """Published OpenVLA folders: with OpenVLA-OFT's training side files they are OFT folders, without them
    OpenVLA ones; a folder no family reads names what it lacks."""
    from vla_models.families import family_for_checkpoint

    official = Path(__file__).parent / "official_vla"
    assert family_for_checkpoint(official / "openvla" / "checkpoint").name == "openvla"
    assert family_for_checkpoint(official / "openvla_oft" / "checkpoint").name == "openvla_oft"
    assert family_for_checkpoint(tmp_path) is None
    with pytest.raises(FileNotFoundError, match=r"config\.json does not exist"):
        load_policy(tmp_path)
