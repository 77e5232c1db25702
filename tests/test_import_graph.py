"""The source tree's import graph (`tests/import_graph.py`, read with `ast`): no import cycles of any kind (at import
time, through lazy imports, through annotation-only imports), packages independent of each other and of the app,
and the app on the packages' public names only."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("import_graph", Path(__file__).with_name("import_graph.py"))
assert _spec is not None and _spec.loader is not None
ig = importlib.util.module_from_spec(_spec)
sys.modules["import_graph"] = ig
_spec.loader.exec_module(ig)


def test_the_graph_reads_every_package_and_the_app() -> None:
    graph = ig.build_graph()
    assert {ig.top_of(m) for m in graph} == {
        "vla_algos",
        "vla_envs",
        "vla_models",
        "vla_infra",
        "train_embodied",
    }
    assert ig.app_names() == {"train_embodied"}
    # module-level and lazy imports are edges (lazy ones only with lazy=True); TYPE_CHECKING imports only with
    # annotations=True
    assert "vla_envs.base" in graph["vla_envs.vector"]
    policy, layout = "vla_models.prismatic.policy_prismatic", "vla_models.prismatic.checkpoint_prismatic"
    assert layout in graph[policy]  # lazy, in save_pretrained
    assert layout not in ig.build_graph(lazy=False)[policy]
    assert "vla_envs.base" not in graph["vla_envs.registry"]  # under `if TYPE_CHECKING:` only
    assert "vla_envs.base" in ig.build_graph(annotations=True)["vla_envs.registry"]


def test_cycles_and_crossings_are_found(tmp_path: Path) -> None:
    """The checks on a small tree with a cycle (relative and lazy imports), a package importing another package
    and the app importing a private name and a submodule's name."""
    for rel, text in {
        "packages/a/src/pa/__init__.py": "",
        "packages/a/src/pa/x.py": "from .y import f\n",
        "packages/a/src/pa/y.py": "def f():\n    from pa import x\n",
        "packages/a/src/pa/_hidden.py": "",
        "packages/a/src/pa/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pa import z\n",
        "packages/a/src/pa/z.py": "from pa.typed import T\n",
        "packages/b/src/pb/__init__.py": "import pa.x\n",
        "apps/app/src/papp/__init__.py": "from pa import _hidden\nfrom pa.x import f\n",
    }.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    graph = ig.build_graph(tmp_path)
    assert ig.cycles(graph) == [["pa.x", "pa.y"]]
    assert ig.cycles(ig.build_graph(tmp_path, lazy=False)) == []
    assert ig.cycles(ig.build_graph(tmp_path, annotations=True)) == [["pa.typed", "pa.z"], ["pa.x", "pa.y"]]
    assert ig.cross_imports(graph, ig.app_names(tmp_path)) == [("pb", "pa.x")]
    assert sorted(ig.private_imports(tmp_path)) == [("papp", "pa._hidden"), ("papp", "pa.x.f")]


def test_no_import_cycle_at_import_time() -> None:
    assert ig.cycles(ig.build_graph(lazy=False)) == []


def test_no_cycle_even_through_lazy_imports() -> None:
    """Imports inside functions count too: a lazy import runs whenever its function runs."""
    found = ig.cycles(ig.build_graph())
    assert found == []


def test_no_cycle_even_through_annotation_only_imports() -> None:
    """Imports under `if TYPE_CHECKING:` count too: two modules whose annotations name each other cannot be read one
    without the other."""
    assert ig.cycles(ig.build_graph(annotations=True)) == []


def test_packages_import_no_other_package_and_no_app() -> None:
    """Annotation-only imports included: a package's types do not come from another package either."""
    assert ig.cross_imports(ig.build_graph(annotations=True), ig.app_names()) == []


def test_the_app_imports_public_names_only() -> None:
    """Only what each package's top level exports: its internals can move without touching the app."""
    assert ig.private_imports() == []
