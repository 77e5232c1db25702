"""The trainer knows model families only through the vla_models registry.

AST scan of the whole app (config validation included): no comparison, `if`, `match` or dict lookup involves
`model_type` or a family name, and every import from vla_models is one of its public names. A family registered
here, outside the app, is then validated, built and loaded by the app like the built-in ones.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

import vla_models
from vla_models import (
    OpenVLAOFTConfig,
    OpenVLAOFTPolicy,
    family_names,
    prismatic_family,
    register_family,
    unregister_family,
)

APP = Path(__file__).resolve().parents[1] / "apps" / "train_embodied" / "src" / "train_embodied"


def _mentions(node: ast.AST, names: set[str]) -> list[str]:
    """Family names and `.model_type` in `node`; a `.model_type` passed to a call is a lookup
    (`get_family(section.model_type)`), not a decision."""
    looked_up = {id(a) for sub in ast.walk(node) if isinstance(sub, ast.Call) for a in sub.args}
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr == "model_type" and id(sub) not in looked_up:
            found.append("model_type")
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value in names:
            found.append(repr(sub.value))
    return found


def family_branches(root: Path = APP) -> list[str]:
    """`file:line: what` for every decision of the app that involves a model family."""
    names = set(family_names())
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            tests: list[ast.AST] = []
            if isinstance(node, (ast.If, ast.IfExp, ast.While)):
                tests = [node.test]
            elif isinstance(node, ast.Compare):
                tests = [node]
            elif isinstance(node, ast.Match):
                tests = [node.subject]
            elif isinstance(node, ast.Subscript):
                tests = [node.slice]
            elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):  # an enumeration of families
                tests = [node] if len(_mentions(node, names)) > 1 else []
            for test in tests:
                out += [f"{path.relative_to(root)}:{node.lineno}: {what}" for what in _mentions(test, names)]
    return sorted(set(out))


def private_model_imports(root: Path = APP) -> list[str]:
    """`file:line: name` for every import of vla_models that is not one of its public names."""
    public = set(vla_models.__all__)
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vla_models"):
                bad = [a.name for a in node.names if node.module != "vla_models" or a.name not in public]
                out += [f"{path.relative_to(root)}:{node.lineno}: {node.module}.{n}" for n in bad]
            elif isinstance(node, ast.Import):
                bad = [a.name for a in node.names if a.name.startswith("vla_models.")]
                out += [f"{path.relative_to(root)}:{node.lineno}: {n}" for n in bad]
    return out


def test_the_app_branches_on_no_model_family() -> None:
    assert family_branches() == []


def test_the_app_imports_only_public_vla_models_names() -> None:
    assert private_model_imports() == []


def test_the_scans_find_a_branch_and_a_private_import(tmp_path: Path) -> None:
    (tmp_path / "io.py").write_text(
        'if section.model_type == "openpi":\n    from vla_models.openpi.processing_openpi import read_norm_stats\n'
        'TYPES = ("openvla", "openvla_oft")\nif get_family(section.model_type).fixed_image_size:\n    pass\n'
        "x = BLOCKS[section.model_type]\n"
    )
    assert family_branches(tmp_path) == ["io.py:1: 'openpi'", "io.py:1: model_type", "io.py:3: 'openvla'",
                                         "io.py:3: 'openvla_oft'", "io.py:6: model_type"]  # fmt: skip
    assert private_model_imports(tmp_path) == ["io.py:2: vla_models.openpi.processing_openpi.read_norm_stats"]


@dataclass(kw_only=True)
class ToyOFTConfig(OpenVLAOFTConfig):
    family: ClassVar[str] = "toy_oft"


class ToyOFTPolicy(OpenVLAOFTPolicy):
    pass


@pytest.fixture
def toy_family():
    from vla_models.family_openvla_oft import OFT_SETTINGS

    family = register_family(
        prismatic_family(
            "toy_oft",
            config=ToyOFTConfig,
            policy=ToyOFTPolicy,
            settings_keys=vla_models.get_family("openvla_oft").settings_keys
            - OFT_SETTINGS
            - {"n_action_bins"},
            unread_settings={"use_proprio": False},
        )
    )
    try:
        yield family
    finally:
        unregister_family("toy_oft")


def test_a_family_registered_outside_the_app_is_checked_built_and_sharded(toy_family, tmp_path) -> None:
    from train_embodied.config.sections import FSDPSection, ModelSection
    from train_embodied.policy_io import build_policy_for_run, load_settings
    from train_embodied.sharding import fsdp_config_for

    section = ModelSection(model_type="toy_oft", use_proprio=False, n_action_bins=64, action_dim=4)
    assert section.check("actor.model") == [
        "actor.model.n_action_bins=64 is invalid with model_type='toy_oft' (read by model_type openvla, "
        "openvla_oft only; allowed: 256)"
    ]
    section = ModelSection(model_type="toy_oft", use_proprio=False, action_dim=4)
    assert section.check("actor.model") == []
    policy = build_policy_for_run(section, {"action_dim": 4})
    assert type(policy) is ToyOFTPolicy
    assert set(fsdp_config_for(FSDPSection(sharding_strategy="full_shard"), policy).wrap_classes) == {
        "LlamaDecoderLayer",
        "Dinov2WithRegistersLayer",
        "SiglipEncoderLayer",
    }
    policy.save_pretrained(str(tmp_path))
    loaded = build_policy_for_run(ModelSection(model_type="toy_oft", use_proprio=False, action_dim=4,
                                               model_path=str(tmp_path)), None)  # fmt: skip
    assert type(loaded) is ToyOFTPolicy and load_settings(section)["model_type"] == "toy_oft"
