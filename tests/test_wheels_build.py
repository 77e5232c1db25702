"""Each package and the app builds an sdist and, from it, a wheel that twine accepts, holding what a user needs
(the modules, `py.typed`, the app's configs and commands) and no tests, at the version its CHANGELOG names.

Installing each wheel alone into a fresh environment and running its own tests against it takes an environment per
package and every package's suite again: `bash scripts/check_wheels.sh` does that (benchmarks/RESULTS.md, Wheels)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {
    "vla-algos": ("packages/vla-algos", "vla_algos"),
    "vla-envs": ("packages/vla-envs", "vla_envs"),
    "vla-models": ("packages/vla-models", "vla_models"),
    "vla-infra": ("packages/vla-infra", "vla_infra"),
    "train-embodied": ("apps/train_embodied", "train_embodied"),
}
pytest.importorskip("build", reason="the build frontend is a test tool: pip install -r requirements-dev.txt")
pytest.importorskip(
    "hatchling", reason="the build backend is a test tool: pip install -r requirements-dev.txt"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """name -> (sdist, wheel): `python -m build` (the wheel built from the sdist), no build isolation."""
    out = {}
    for name, (src, _) in PACKAGES.items():
        dist = tmp_path_factory.mktemp(name)
        subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(REPO / src)],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        (sdist,), (wheel,) = dist.glob("*.tar.gz"), dist.glob("*.whl")
        out[name] = (sdist, wheel)
    return out


def test_twine_accepts_every_sdist_and_wheel(built) -> None:
    files = [str(f) for pair in built.values() for f in pair]
    out = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("PASSED") == len(files), out.stdout


@pytest.mark.parametrize("name", list(PACKAGES))
def test_wheel_holds_the_package_at_its_changelog_version_without_tests(name: str, built) -> None:
    src, module = PACKAGES[name]
    _, wheel = built[name]
    source_version = re.search(
        r'^__version__ = "([^"]+)"', (REPO / src / "src" / module / "__init__.py").read_text(), re.MULTILINE
    ).group(1)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(meta_name).decode())
        entry_points = next((zf.read(n).decode() for n in names if n.endswith("entry_points.txt")), "")
    assert meta["Version"] == source_version
    assert re.search(
        rf"^## {re.escape(source_version)}\b", (REPO / src / "CHANGELOG.md").read_text(), re.MULTILINE
    )
    sources = sorted(p.relative_to(REPO / src / "src").as_posix() for p in (REPO / src / "src").rglob("*.py"))
    assert sorted(n for n in names if n.endswith(".py")) == sources
    assert f"{module}/py.typed" in names or not (REPO / src / "src" / module / "py.typed").exists()
    assert not [n for n in names if "/tests/" in n or n.startswith("tests/")]
    assert meta["Description-Content-Type"] == "text/markdown" and meta.get_payload().strip()
    if name == "train-embodied":
        configs = sorted(
            p.relative_to(REPO / src).as_posix() for p in (REPO / src / "configs").rglob("*.yaml")
        )
        assert sorted(n.removeprefix("train_embodied/") for n in names if n.endswith(".yaml")) == configs
        for command in ("vla-train", "vla-eval", "vla-sft"):
            assert f"{command} = train_embodied.cli:" in entry_points
        requires = meta.get_all("Requires-Dist")
        for package in ("vla-algos", "vla-envs", "vla-models", "vla-infra"):
            assert any(r.startswith(package) for r in requires), requires
    if name == "vla-envs":
        assert "vla-envs = vla_envs.cli:main" in entry_points


@pytest.mark.parametrize("name", list(PACKAGES))
def test_sdist_holds_what_builds_the_wheel(name: str, built) -> None:
    import tarfile

    sdist, _ = built[name]
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    assert {"pyproject.toml", "README.md"} <= names
    src = PACKAGES[name][0]
    assert {p.relative_to(REPO / src).as_posix() for p in (REPO / src / "src").rglob("*.py")} <= names
