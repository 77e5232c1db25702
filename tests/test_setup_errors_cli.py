"""`vla-train` on a machine that lacks something a simulator needs: one line on stderr naming what is missing and
the command that fixes it, exit 2, for each of the four simulators; before any worker starts where the lack can be
seen from the command (a package, an asset file, RoboTwin's interpreter, a display library), and from the worker
with the same kind of line where it shows only there (a Vulkan driver that cannot create a device, on the local
and on the Ray backend).

A package counts as not installed in a child process whose import system refuses it (as vla-envs' own tests
do): uninstalling a simulator from the shared environment is not an option for a test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from train_embodied.testing import PPO_TINY

REPO = Path(__file__).resolve().parents[1]
STANDIN_SCRIPT = REPO / "scripts" / "maniskill_standin_assets.py"

# Each scenario: modules made not importable, environment variables, vla-train's arguments. They run one after the
# other in one process (the imports are paid once); a module is hidden only while nothing imported it.
SCENARIOS: dict[str, tuple[list[str], dict[str, str | None], list[str]]] = {
    "metaworld_package": (["metaworld"], {}, ["metaworld_ppo_tiny_cpu", *PPO_TINY]),
    "libero_package": (
        ["robosuite"],
        {},
        [
            "metaworld_ppo_tiny_cpu",
            *PPO_TINY,
            "env@env.train=libero_spatial",
            "env@env.eval=libero_spatial",
            "env.train.image_size=32",
            "env.eval.image_size=32",
            "env.train.reward_mode=sparse",
            "env.eval.num_trials_per_task=50",  # LIBERO's 50 fixed starts (the MetaWorld config holds out more)
            "env.eval.trial_offset=0",
        ],
    ),
    "metaworld_display": ([], {"MUJOCO_GL": "glfw", "DISPLAY": None}, ["metaworld_ppo_tiny_cpu", *PPO_TINY]),
    "maniskill_assets": (
        [],
        {"MS_ASSET_DIR": "{tmp}/none", "MANISKILL_ASSET_DIR": "{tmp}/none"},
        ["maniskill_put_on_plate_ppo_tiny_cpu"],
    ),
    "maniskill_vulkan": (
        [],
        {
            "VK_ICD_FILENAMES": "{tmp}/missing_icd.json",
            "MS_ASSET_DIR": "{pack}",
            "MANISKILL_ASSET_DIR": "{pack}",
        },
        ["maniskill_put_on_plate_ppo_tiny_cpu"],
    ),
    "robotwin_assets_path": (
        [],
        {"ROBOTWIN_VENV": "{robotwin_venv}"},
        ["robotwin_ppo_tiny_cpu", "env.train.extra.assets_path={tmp}/wrong"],
    ),
    "robotwin_python": (
        [],
        {"ROBOTWIN_VENV": "{robotwin_venv}"},
        ["robotwin_ppo_tiny_cpu", "env.train.extra.robotwin_python={tmp}/no/python"],
    ),
}

_RUN_SCENARIOS = """
import contextlib, importlib.abc, io, json, os, sys
hidden = set()
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in hidden:
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, Hide())
from train_embodied.cli import train_main
results = {}
for name, (hide, env, args) in json.loads(sys.argv[1]).items():
    hidden.clear()
    hidden.update(hide)
    saved = dict(os.environ)
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = train_main(args)
        except SystemExit as exc:
            code = exc.code
    os.environ.clear()
    os.environ.update(saved)
    results[name] = [code, [line for line in err.getvalue().splitlines() if line.strip()]]
print("RESULTS", json.dumps(results))
"""


@pytest.fixture(scope="module")
def standin_pack(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("maniskill_standin")
    subprocess.run([sys.executable, str(STANDIN_SCRIPT), "--out", str(out)], check=True, timeout=300)
    return out


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, standin_pack: Path) -> dict[str, tuple[int, list[str], Path]]:
    """Each scenario's exit code, stderr lines and folder, from one vla-train process per module."""
    tmp = tmp_path_factory.mktemp("setup_errors")
    robotwin_venv = os.environ.get("ROBOTWIN_VENV", str(tmp / "no-robotwin-venv"))
    plan = {}
    for name, (hide, env, args) in SCENARIOS.items():
        folder = tmp / name
        fill = {"tmp": str(folder), "robotwin_venv": robotwin_venv, "pack": str(standin_pack)}
        plan[name] = (
            hide,
            {k: None if v is None else v.format(**fill) for k, v in env.items()},
            [a.format(**fill) for a in args] + [f"runner.logger.log_path={folder / 'runs'}"],
        )
    out = subprocess.run(
        [sys.executable, "-c", _RUN_SCENARIOS, json.dumps(plan)], capture_output=True, text=True, timeout=1200
    )
    found = [line for line in out.stdout.splitlines() if line.startswith("RESULTS ")]
    assert found, out.stderr[-3000:]
    results = json.loads(found[0].removeprefix("RESULTS "))
    return {name: (code, lines, tmp / name) for name, (code, lines) in results.items()}


def _one_line(outcome: tuple[int, list[str], Path]) -> str:
    """The only stderr line of a command that ended with exit 2 before creating its run folder."""
    code, lines, folder = outcome
    assert code == 2, lines[-20:]
    assert len(lines) == 1, lines[-20:]
    assert not (folder / "runs").exists()
    return lines[0]


def test_metaworld_package_missing(outcomes) -> None:
    line = _one_line(outcomes["metaworld_package"])
    assert line.startswith(
        "vla-train: error: env.train: env_type='metaworld' needs the Python package(s) metaworld"
    )
    assert "`pip install -e 'packages/vla-envs[metaworld]'`" in line


def test_metaworld_display_library_missing(outcomes) -> None:
    line = _one_line(outcomes["metaworld_display"])
    assert "MUJOCO_GL=glfw, which needs an X display" in line
    assert "`export MUJOCO_GL=egl PYOPENGL_PLATFORM=egl`" in line


def test_libero_package_missing(outcomes) -> None:
    line = _one_line(outcomes["libero_package"])
    assert line.startswith(
        "vla-train: error: env.train: env_type='libero' needs the Python package(s) robosuite"
    )
    assert "`pip install -e 'packages/vla-envs[libero]'`" in line


def test_maniskill_asset_pack_missing(outcomes) -> None:
    line = _one_line(outcomes["maniskill_assets"])
    assert line.startswith(
        "vla-train: error: env.train: ManiSkill task 'PutOnPlateInScene25Main-v3' cannot find"
    )
    assert "`python scripts/maniskill_standin_assets.py --out ~/.maniskill-standin && export" in line


def test_maniskill_no_vulkan_driver(outcomes) -> None:
    line = _one_line(outcomes["maniskill_vulkan"])
    assert "ManiSkill (SAPIEN) needs a Vulkan device and no Vulkan driver" in line
    assert "`bash scripts/install_system_deps.sh`" in line


@pytest.mark.parametrize(
    ("scenario", "wanted"),
    [
        ("robotwin_assets_path", "RoboTwin assets are missing under assets_path='{tmp}/wrong'"),
        ("robotwin_python", "='{tmp}/no/python' is not an executable"),
    ],
)
def test_robotwin_wrong_assets_path_or_interpreter(scenario: str, wanted: str, outcomes) -> None:
    line = _one_line(outcomes[scenario])
    assert line.startswith("vla-train: error: env.train: ")
    assert wanted.format(tmp=outcomes[scenario][2]) in line
    assert "`bash scripts/setup_robotwin.sh && export ROBOTWIN_VENV=$PWD/.venv-robotwin" in line


def _fake_vulkan_driver(tmp_path: Path) -> Path:
    """A Vulkan driver manifest whose library does not exist: the loader finds a manifest, SAPIEN no device."""
    icd = tmp_path / "fake_icd.json"
    icd.write_text(
        '{"file_format_version": "1.0.0", "ICD": {"library_path": "/nonexistent/libvulkan_fake.so", '
        '"api_version": "1.3.0"}}'
    )
    return icd


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", pytest.param("ray", marks=[pytest.mark.long, pytest.mark.ray])])
def test_a_worker_that_finds_no_vulkan_device_ends_the_run_in_one_line(
    backend: str, standin_pack: Path, tmp_path: Path
) -> None:
    """The driver's check passes (a driver manifest exists); the env worker cannot create a Vulkan device: its
    error reaches the command unchanged, through a Ray actor too, and is its last stderr line (what came before
    is the simulator's own log), exit 2."""
    if backend == "ray":
        pytest.importorskip("ray")
    env = {
        "MS_ASSET_DIR": str(standin_pack),
        "MANISKILL_ASSET_DIR": str(standin_pack),
        "VK_ICD_FILENAMES": str(_fake_vulkan_driver(tmp_path)),
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
    }
    args = ["maniskill_put_on_plate_ppo_tiny_cpu", f"cluster.backend={backend}"]
    if backend == "ray":
        args.append("cluster.component_placement={env: 0, rollout: 0, actor: 0}")
    out = subprocess.run(
        [Path(sys.executable).with_name("vla-train"), *args, f"runner.logger.log_path={tmp_path / 'runs'}"],
        capture_output=True, text=True, timeout=900, env={**os.environ, **env},
    )  # fmt: skip
    code, lines = out.returncode, [line for line in out.stderr.splitlines() if line.strip()]
    assert code == 2, lines[-30:]
    assert lines[-1].startswith("vla-train: error: ManiSkill (SAPIEN) found no usable Vulkan device"), lines[
        -30:
    ]
    assert "`bash scripts/install_system_deps.sh`" in lines[-1]
    assert not any("Traceback" in line for line in lines), lines[-30:]
