"""The README's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 3, "README lacks its python examples"
    return blocks


def test_readme_example_runs(capsys):
    namespace: dict[str, object] = {}
    exec(compile(_blocks()[0], str(README), "exec"), namespace)
    printed = capsys.readouterr().out
    assert "actor/approx_kl" in printed and "critic/explained_variance" in printed
    assert namespace["loss"].grad_fn is not None  # type: ignore[attr-defined]


def test_readme_cleanrl_style_example_runs(capsys):
    """A CleanRL-style PPO step of a gymnasium policy through the registered loss: one log-prob per decision."""
    namespace: dict[str, object] = {}
    exec(compile(_blocks()[1], str(README), "exec"), namespace)
    printed = capsys.readouterr().out
    assert "actor/entropy_loss" in printed and "critic/value_loss" in printed
    assert all(p.grad is not None for p in namespace["actor"].parameters())  # type: ignore[attr-defined]


def test_readme_reuse_section_points_to_the_gymnasium_example():
    """Reuse in another RL project is shown by a real trainer (examples/ppo_gymnasium.py, its own tests), not a
    snippet: the section names it and the file is there."""
    text = README.read_text()
    section = text[text.index("## Reuse in another RL project") : text.index("## What is in it")]
    assert "examples/ppo_gymnasium.py" in section and "```python" not in section
    assert (README.parent / "examples" / "ppo_gymnasium.py").is_file()


def test_readme_micro_batch_example_runs(capsys):
    """Micro-batches normalised by their minibatch's weight sum accumulate its gradient."""
    exec(compile(_blocks()[2], str(README), "exec"), {})
    assert capsys.readouterr().out.strip() == "tensor(True)"
