"""Malformed model folders fail at load with one line that names the file (and the key), never a traceback from
deep inside a parser and never a policy that loads with statistics it cannot honour.

Cases: JSON nested past the parser's depth (config.json, manifest.json); tokenizer files of the wrong shape;
lerobot processor files cut short or with ``steps`` of the wrong type; lerobot normaliser statistics with NaN,
fewer entries than the feature's size, or a cut safetensors file; openpi ``norm_stats.json`` with NaN or fewer
action entries than the policy's action dimension.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from vla_models import OpenVLAOFTConfig, build_policy, load_policy
from vla_models.openpi import OpenPiConfig

LEROBOT = Path(__file__).parent / "fixtures" / "lerobot_pi"
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture(scope="module")
def oft_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("oft") / "policy"
    torch.manual_seed(0)
    build_policy(OpenVLAOFTConfig.tiny(action_dim=4)).save_pretrained(folder)
    return folder


def _copy(src: Path, tmp_path: Path, *, drop_manifest: bool = False) -> Path:
    out = tmp_path / src.name
    shutil.copytree(src, out)
    if drop_manifest:
        (out / "manifest.json").unlink()  # a folder from elsewhere: no checksums to catch the edit first
    return out


@pytest.mark.parametrize("name", ["config.json", "manifest.json"])
def test_json_nested_past_the_parsers_depth_is_named(oft_folder: Path, tmp_path: Path, name: str) -> None:
    folder = _copy(oft_folder, tmp_path)
    (folder / name).write_text(DEEP)
    with pytest.raises(ValueError, match=rf"{name} is not valid JSON: it nests deeper than the JSON parser"):
        load_policy(str(folder))


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("tokenizer.json", "[1, 2]", r"tokenizer.json holds a JSON array where a JSON object belongs"),
        ("tokenizer.json", '{"model": 5}', r"tokenizer.json has no 'model' object"),
        ("tokenizer_config.json", "[1]", r"tokenizer_config.json holds a JSON array where a JSON object"),
        (
            "tokenizer_config.json",
            '{"added_tokens_decoder": 5}',
            r"the tokenizer files \(tokenizer.json, tokenizer_config.json\) do not load",
        ),
    ],
)
def test_tokenizer_files_of_the_wrong_shape_are_named(
    oft_folder: Path, tmp_path: Path, name: str, text: str, expected: str
) -> None:
    folder = _copy(oft_folder, tmp_path, drop_manifest=True)
    (folder / name).write_text(text)
    with pytest.raises(ValueError, match=expected):
        load_policy(str(folder))


def _edit_processor(folder: Path, edit) -> None:
    file = folder / "policy_preprocessor.json"
    d = json.loads(file.read_text())
    edit(d)
    file.write_text(json.dumps(d))


def test_a_cut_processor_file_is_named(tmp_path: Path) -> None:
    folder = _copy(LEROBOT / "pi0", tmp_path)
    file = folder / "policy_preprocessor.json"
    file.write_text(file.read_text()[:500])
    with pytest.raises(ValueError, match=r"policy_preprocessor.json is not valid JSON"):
        load_policy(str(folder))


@pytest.mark.parametrize(("steps", "kind"), [(5, "number"), ("normalizer", "string"), ({"a": 1}, "object")])
def test_processor_steps_of_the_wrong_type_are_named(tmp_path: Path, steps, kind: str) -> None:
    folder = _copy(LEROBOT / "pi0", tmp_path)
    _edit_processor(folder, lambda d: d.update(steps=steps))
    with pytest.raises(ValueError, match=rf"policy_preprocessor.json: 'steps' holds a JSON {kind}"):
        load_policy(str(folder))


def test_a_processor_step_that_is_not_an_object_is_named(tmp_path: Path) -> None:
    folder = _copy(LEROBOT / "pi0", tmp_path)
    _edit_processor(folder, lambda d: d["steps"].append(3))
    with pytest.raises(ValueError, match=r"policy_preprocessor.json: steps\[\d+\] holds a JSON number"):
        load_policy(str(folder))


def _edit_stats(folder: Path, pattern: str, edit) -> Path:
    file = next(folder.glob(pattern))
    tensors = load_file(str(file))
    save_file({k: edit(k, v.clone()) for k, v in tensors.items()}, str(file))
    return file


def test_nan_normaliser_statistics_are_refused(tmp_path: Path) -> None:
    folder = _copy(LEROBOT / "pi0", tmp_path)

    def nan_first(key: str, value: torch.Tensor) -> torch.Tensor:
        if key == "action.std":
            value[0] = float("nan")
        return value

    file = _edit_stats(folder, "policy_postprocessor*unnormalizer_processor.safetensors", nan_first)
    with pytest.raises(ValueError, match=rf"{file.name}: action.std holds 1 non-finite value"):
        load_policy(str(folder))


@pytest.mark.parametrize(
    ("pattern", "prefix", "keep", "dim"),
    [
        ("policy_postprocessor*unnormalizer_processor.safetensors", "action.", 3, 5),
        ("policy_preprocessor*normalizer_processor.safetensors", "observation.state.", 2, 6),
    ],
)
def test_statistics_shorter_than_the_feature_are_refused(
    tmp_path: Path, pattern: str, prefix: str, keep: int, dim: int
) -> None:
    folder = _copy(LEROBOT / "pi0", tmp_path)
    file = _edit_stats(folder, pattern, lambda k, v: v[:keep] if k.startswith(prefix) else v)
    with pytest.raises(
        ValueError,
        match=rf"{file.name}: {prefix}\w+ has {keep} entries, fewer than the {dim} of {prefix[:-1]} that config.json",
    ):
        load_policy(str(folder))


def test_a_cut_normaliser_file_is_named(tmp_path: Path) -> None:
    folder = _copy(LEROBOT / "pi0", tmp_path)
    file = next(folder.glob("policy_preprocessor*normalizer_processor.safetensors"))
    file.write_bytes(file.read_bytes()[:40])
    with pytest.raises(ValueError, match=rf"{file.name} is not a readable safetensors file"):
        load_policy(str(folder))


def _pi0_with_stats(folder: Path, actions: dict, state: dict | None = None) -> Path:
    torch.manual_seed(0)
    cfg = OpenPiConfig.tiny(
        action_dim=4, norm_stats={"actions": actions, **({"state": state} if state else {})}
    )
    build_policy(cfg).save_pretrained(folder)
    return folder


def test_nan_in_an_openpi_norm_stats_file_is_refused(tmp_path: Path) -> None:
    ok = {"mean": [0.0] * 4, "std": [1.0] * 4}
    folder = _pi0_with_stats(tmp_path / "pi0", ok)
    (folder / "manifest.json").unlink()
    file = next(folder.glob("assets/*/norm_stats.json"))
    d = json.loads(file.read_text())
    d["norm_stats"]["actions"]["std"][2] = float("nan")  # json writes NaN, as numpy-based writers do
    file.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=r"norm_stats.json: norm_stats.actions.std holds 1 non-finite value"):
        load_policy(str(folder))


def test_action_statistics_shorter_than_the_action_dim_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"action statistics cover 3 dimensions, fewer than action_dim=4"):
        _pi0_with_stats(tmp_path / "pi0", {"mean": [0.0] * 3, "std": [1.0] * 3})


def test_state_statistics_narrower_than_the_state_are_refused(tmp_path: Path, make_obs_fn) -> None:
    ok = {"mean": [0.0] * 4, "std": [1.0] * 4}
    policy = build_policy(OpenPiConfig.tiny(action_dim=4, norm_stats={"actions": ok, "state": ok}))
    with pytest.raises(ValueError, match=r"state statistics cover 4 dimensions, the env's state has 6"):
        policy.predict(make_obs_fn(1, state_dim=6), mode="greedy")
