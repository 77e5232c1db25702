"""Paths with spaces and commas reach the config as written: the launcher's run folder, a user's config file, and
the app's own configs folder (Hydra reads an unquoted comma as a sweep and refuses spaces)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from train_embodied.cli import train_main
from train_embodied.config import load as config_load

REPO = Path(__file__).resolve().parents[1]
ODD = "a b,c"


def test_the_launcher_passes_a_run_folder_with_a_space_and_a_comma(tmp_path: Path) -> None:
    logs = tmp_path / ODD
    env = {**os.environ, "LOGS_ROOT": str(logs), "VLA_TRAIN": str(Path(sys.executable).parent / "vla-train")}
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "run_embodiment.sh"), "metaworld_ppo_tiny_cpu", "--validate"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = logs.iterdir()
    assert f"is valid (log dir would be {run})" in proc.stdout


def test_a_config_file_in_a_folder_with_a_space_and_a_comma(tmp_path: Path, capsys) -> None:
    folder = tmp_path / ODD
    folder.mkdir()
    (folder / "mine.yaml").write_text(
        "defaults:\n  - metaworld_ppo_tiny_cpu\n  - _self_\nrunner:\n  max_epochs: 3\n"
    )
    assert train_main([str(folder / "mine.yaml"), "--validate"]) == 0, capsys.readouterr().err


def test_the_apps_configs_folder_under_a_space_and_a_comma(tmp_path: Path, monkeypatch, capsys) -> None:
    """An install whose path holds a space and a comma: the configs folder reached through such a path."""
    configs = tmp_path / ODD
    configs.symlink_to(config_load.config_dir(), target_is_directory=True)
    monkeypatch.setattr(config_load, "config_dir", lambda: configs)
    user = tmp_path / "user"
    user.mkdir()
    (user / "mine.yaml").write_text("defaults:\n  - metaworld_ppo_tiny_cpu\n  - _self_\n")
    assert train_main([str(user / "mine.yaml"), "--validate"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("value", ["plain", "a b,c", "it's", 'say "hi"', "both ' and \"", "back\\slash 'q'"])
def test_the_shell_and_python_quoting_agree(value: str) -> None:
    from train_embodied.config.override_syntax import hydra_quoted

    out = subprocess.run(
        ["bash", "-c", f'source "{REPO}/scripts/hydra_quote.sh"; hydra_quote "$1"', "_", value],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out == hydra_quoted(value)
    from hydra.core.override_parser.overrides_parser import OverridesParser

    (parsed,) = OverridesParser.create().parse_overrides([f"key={out}"])
    assert parsed.value() == value
