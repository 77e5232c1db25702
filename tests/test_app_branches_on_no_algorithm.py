"""The app looks algorithms up in the vla_algos registries and branches on no algorithm name.

AST scan of every module of the app, its config validation (`config/`) included: no comparison, `if`, `match` or
dict lookup may involve `adv_type`, `loss_type`, `loss_agg_mode` or a registered algorithm name. The names are
only passed to `get_advantage_estimator`, `get_policy_loss` and `get_loss_agg_mode` (and to the config's check
that a name is registered), and every decision reads a property of the registered entry (`needs_values`,
`grouped_starts`, `uses_critic`, ...), so a newly registered estimator or loss needs no change in the app.
"""

from __future__ import annotations

import ast
from pathlib import Path

from vla_algos import ADVANTAGE_ESTIMATORS, LOSS_AGG_MODES, POLICY_LOSSES

APP = Path(__file__).resolve().parents[1] / "apps" / "train_embodied" / "src" / "train_embodied"
KEYS = {"adv_type", "loss_type", "loss_agg_mode"}
NAMES = set(ADVANTAGE_ESTIMATORS) | set(POLICY_LOSSES) | set(LOSS_AGG_MODES)


def _mentions(node: ast.AST, names: bool = True) -> list[str]:
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr in KEYS:
            found.append(sub.attr)
        elif (
            names
            and isinstance(sub, ast.Constant)
            and isinstance(sub.value, str)
            and sub.value in NAMES | KEYS
        ):
            found.append(repr(sub.value))
    return found


def algorithm_branches(root: Path = APP) -> list[str]:
    """`file:line: what` for every decision of the app that involves an algorithm name."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            tests, names = [], True
            if isinstance(node, (ast.If, ast.IfExp, ast.While)):
                tests = [node.test]
            elif isinstance(node, ast.Compare):
                tests = [node]
            elif isinstance(node, ast.Match):
                tests = [node.subject]
            elif isinstance(
                node, ast.Subscript
            ):  # a lookup keyed by the setting (placement["actor"] is fine)
                tests, names = [node.slice], False
            for test in tests:
                for what in _mentions(test, names):
                    out.append(f"{path.relative_to(root)}:{node.lineno}: {what}")
    return sorted(set(out))


def test_the_app_branches_on_no_algorithm_name() -> None:
    assert algorithm_branches() == []


def test_the_scan_finds_a_branch(tmp_path: Path) -> None:
    (tmp_path / "runner.py").write_text(
        'if algo.adv_type == "grpo":\n    pass\nx = {"gae": 1}[algo.adv_type]\n'
    )
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "sections.py").write_text(
        'def check(self):\n    if self.adv_type == "grpo" and self.group_size < 2:\n        return ["no"]\n'
        '    ok = "ok" if self.loss_type in ("actor_critic",) else "no"\n'
    )
    assert algorithm_branches(tmp_path) == [
        "config/sections.py:2: 'grpo'",
        "config/sections.py:2: adv_type",
        "config/sections.py:4: 'actor_critic'",
        "config/sections.py:4: loss_type",
        "runner.py:1: 'grpo'",
        "runner.py:1: adv_type",
        "runner.py:3: adv_type",
    ]


if __name__ == "__main__":
    print("\n".join(algorithm_branches()) or "no algorithm-name branch in the app")
