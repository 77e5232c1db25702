"""Set-up errors of the four simulators: a missing package, asset pack, runtime or display library is one
`SimulatorSetupError` line naming what is missing and the command that fixes it, from `check_env_setup` before any
simulator starts, and the same line from a worker process that finds the lack itself.

A package counts as not installed in a child process whose import system refuses it (the way the maniskill tests
hide `rlinf`): uninstalling a simulator from the shared environment is not an option for a test."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vla_envs import (
    DisplayUnavailable,
    EnvConfig,
    SimulatorAssetsMissing,
    SimulatorNotInstalled,
    SimulatorSetupError,
    check_env_setup,
)
from vla_envs.maniskill import ManiSkillAssetsMissingError, ManiSkillUnavailableError
from vla_envs.robotwin import RoboTwinUnavailableError

REPO = Path(__file__).resolve().parents[3]
MAIN = "PutOnPlateInScene25Main-v3"

_HIDDEN = """
import importlib.abc, json, sys
hidden = sys.argv[1].split(",")
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in hidden:
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, Hide())
from vla_envs import EnvConfig, SimulatorSetupError, check_env_setup, make_env
cfg = EnvConfig(**json.loads(sys.argv[2]))
for name, call in (("check", check_env_setup), ("make_env", make_env))[: int(sys.argv[3])]:
    try:
        call(cfg)
    except SimulatorSetupError as exc:
        print(name, type(exc).__name__, isinstance(exc, ImportError), json.dumps(str(exc)))
"""


def _with_hidden(modules: str, cfg: dict, *, build: bool = True) -> dict[str, tuple[str, bool, str]]:
    """What `check_env_setup(cfg)` (and `make_env(cfg)` when `build`) raise with `modules` not importable."""
    out = subprocess.run(
        [sys.executable, "-c", _HIDDEN, modules, json.dumps(cfg), "2" if build else "1"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    found = {}
    for line in out.stdout.splitlines():
        name, kind, is_import_error, message = line.split(" ", 3)
        found[name] = (kind, is_import_error == "True", json.loads(message))
    return found


@pytest.mark.parametrize(
    ("env_type", "task", "hidden", "extra"),
    [
        ("metaworld", "drawer-close-v3", "metaworld", "metaworld"),
        ("libero", "libero_spatial", "robosuite", "libero"),
        ("maniskill", "PickCube-v1", "mani_skill", "maniskill"),
    ],
)
def test_a_missing_simulator_package_is_one_line_naming_it_and_the_install_command(
    env_type: str, task: str, hidden: str, extra: str
) -> None:
    cfg = {"env_type": env_type, "task_set" if env_type == "libero" else "task": task}
    found = _with_hidden(hidden, cfg)
    for name in ("check", "make_env"):  # before any simulator starts, and when the env is built all the same
        kind, is_import_error, message = found[name]
        assert kind == "SimulatorNotInstalled" and is_import_error  # callers catching ImportError still do
        assert "\n" not in message and hidden in message
        assert (
            f"`pip install -e 'packages/vla-envs[{extra}]'`" in message
            and "`bash scripts/setup.sh`" in message
        )
    assert extra in importlib.metadata.metadata("vla-envs").get_all(
        "Provides-Extra"
    )  # the extra it names exists


def test_missing_put_on_plate_task_code_is_found_without_importing_maniskill() -> None:
    found = _with_hidden("rlinf", {"env_type": "maniskill", "task": MAIN}, build=False)
    kind, is_import_error, message = found["check"]
    assert kind == "SimulatorNotInstalled" and is_import_error
    assert "`pip install --no-deps rlinf==0.3.0`" in message and "\n" not in message


def test_missing_put_on_plate_asset_pack_names_the_files_and_the_command_that_writes_one(
    tmp_path: Path,
) -> None:
    cfg = EnvConfig(env_type="maniskill", task=MAIN, extra={"asset_dir": str(tmp_path / "nothing")})
    with pytest.raises(ManiSkillAssetsMissingError) as info:
        check_env_setup(cfg)
    msg = str(info.value)
    assert isinstance(info.value, SimulatorAssetsMissing) and isinstance(info.value, FileNotFoundError)
    assert "\n" not in msg and "bridge_table_1_v1.glb" in msg and "wx250s.urdf" in msg
    assert "`python scripts/maniskill_standin_assets.py --out ~/.maniskill-standin && export" in msg


def test_the_asset_pack_command_works_when_pasted(tmp_path: Path) -> None:
    """The command of the missing-assets line, run as printed (in the repository, HOME elsewhere), makes the same
    check pass in the shell it leaves behind."""
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "MS_ASSET_DIR": str(tmp_path / "none"),
        "PYTHON": sys.executable,
    }
    env["MANISKILL_ASSET_DIR"] = env["MS_ASSET_DIR"]
    check = f"from vla_envs import EnvConfig, check_env_setup; check_env_setup(EnvConfig(env_type='maniskill', task={MAIN!r}))"
    before = subprocess.run(
        [sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=120
    )
    line = before.stderr.strip().splitlines()[-1]
    assert "ManiSkillAssetsMissingError" in line, before.stderr[-2000:]
    command = line.split("run `", 1)[1].split("`", 1)[0]
    script = f'python() {{ "$PYTHON" "$@"; }}\n{command}\n"$PYTHON" -c {json.dumps(check)}\n'
    after = subprocess.run(
        ["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert after.returncode == 0, after.stderr[-2000:]
    assert (tmp_path / ".maniskill-standin" / "standin.json").is_file()


def test_no_vulkan_driver_is_found_before_any_simulator_starts(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        from vla_envs import EnvConfig, check_env_setup
        from vla_envs.maniskill import ManiSkillUnavailableError
        try:
            check_env_setup(EnvConfig(env_type="maniskill", task="PickCube-v1"))
        except ManiSkillUnavailableError as exc:
            print("RAISED", str(exc))
        print("IMPORTED", "mani_skill" in sys.modules)
        """
    )
    env = {**os.environ, "VK_ICD_FILENAMES": str(tmp_path / "missing_icd.json")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "RAISED ManiSkill (SAPIEN) needs a Vulkan device and no Vulkan driver" in out.stdout, out.stderr
    assert "`bash scripts/install_system_deps.sh`" in out.stdout and "IMPORTED False" in out.stdout
    assert issubclass(ManiSkillUnavailableError, DisplayUnavailable)


def test_mujoco_glfw_without_a_display_is_one_line_from_the_check_and_from_a_worker() -> None:
    """MUJOCO_GL=glfw needs an X display: the driver's check finds it, and so does a worker process that was
    given that setting (a node set up differently from the driver's), which passes the same line on."""
    code = textwrap.dedent(
        """
        from vla_envs import DisplayUnavailable, EnvConfig, check_env_setup, make_env
        cfg = EnvConfig(env_type="metaworld", task="drawer-close-v3", num_envs=1, envs_per_worker=1)
        for name, call in (("check", check_env_setup), ("worker", make_env)):
            try:
                call(cfg)
            except DisplayUnavailable as exc:
                print(name, "RAISED", str(exc).count(chr(10)), str(exc))
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "PYOPENGL_PLATFORM")}
    env["MUJOCO_GL"] = "glfw"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    lines = {line.split(" ", 1)[0]: line for line in out.stdout.splitlines()}
    assert set(lines) == {"check", "worker"}, out.stderr[-2000:]
    expected = "RAISED 0 env_type='metaworld' renders with MuJoCo's MUJOCO_GL=glfw, which needs an X display"
    assert lines["check"].startswith(f"check {expected}")
    assert lines["worker"] == lines["check"].replace("check ", "worker ", 1)
    assert "`export MUJOCO_GL=egl PYOPENGL_PLATFORM=egl`" in lines["check"]


@pytest.mark.parametrize("case", ["no_assets_path", "wrong_assets_path", "not_executable", "no_robotwin"])
def test_robotwin_set_up_errors_are_one_line_before_any_robotwin_process(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ROBOTWIN_PATH", "ASSETS_PATH", "ROBOTWIN_ASSETS_ROOT", "ROBOTWIN_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    assets = tmp_path / "assets_root"
    for d in ("assets/embodiments", "assets/objects", "assets/background_texture"):
        (assets / d).mkdir(parents=True)
    extra = {
        "no_assets_path": {},
        "wrong_assets_path": {"assets_path": str(tmp_path / "wrong")},
        "not_executable": {"assets_path": str(assets), "robotwin_python": "/no/python"},
        "no_robotwin": {"assets_path": str(assets), "robotwin_python": sys._base_executable},
    }[case]
    with pytest.raises(RoboTwinUnavailableError) as info:
        check_env_setup(EnvConfig(env_type="robotwin", task="place_empty_cup", extra=extra))
    msg = str(info.value)
    assert isinstance(info.value, SimulatorSetupError) and "\n" not in msg
    wanted = {
        "no_assets_path": "needs RoboTwin's assets: none of extra['assets_path']",
        "wrong_assets_path": f"RoboTwin assets are missing under assets_path='{tmp_path / 'wrong'}'",
        "not_executable": "='/no/python' is not an executable",
        "no_robotwin": f"={sys._base_executable!r} cannot import robotwin",
    }[case]
    assert wanted in msg
    assert "run `bash scripts/setup_robotwin.sh && export ROBOTWIN_VENV=$PWD/.venv-robotwin" in msg


def test_robotwin_environment_built_by_the_script_passes_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variables the RoboTwin line tells to export, pointed at an environment `scripts/setup_robotwin.sh`
    built (ROBOTWIN_VENV, as scripts/test.sh sets it), pass the check."""
    venv = os.environ.get("ROBOTWIN_VENV")
    if not venv or not Path(venv, "bin", "python").exists():
        pytest.skip("no RoboTwin environment: ROBOTWIN_VENV=<bash scripts/setup_robotwin.sh's folder>")
    for name in ("ROBOTWIN_PATH", "ASSETS_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ROBOTWIN_PYTHON", f"{venv}/bin/python")
    monkeypatch.setenv("ROBOTWIN_ASSETS_ROOT", f"{venv}/robotwin-assets")
    check_env_setup(EnvConfig(env_type="robotwin", task="place_empty_cup"))


def test_every_adapter_declares_a_set_up_check() -> None:
    from vla_envs import adapters

    declared = {a.name: a.check_setup is not None for a in adapters()}  # built-ins, beside a test's own
    assert {name: declared[name] for name in ("libero", "maniskill", "metaworld", "robotwin")} == {
        "libero": True,
        "maniskill": True,
        "metaworld": True,
        "robotwin": True,
    }
    assert issubclass(SimulatorNotInstalled, ImportError) and issubclass(
        SimulatorAssetsMissing, FileNotFoundError
    )
