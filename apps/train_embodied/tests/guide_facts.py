"""The reference user guides' facts the guide tests check, kept in this repository as test data, and how they are
read from the guides' own text.

`data/guide_facts.yaml` holds, per guide (LIBERO, ManiSkill3, MetaWorld, the overview, RoboTwin): its YAML snippets
(nested), the `key: value` settings its prose gives, the launcher commands and config files it names, and the metric
names it lists. `test_guide_snippets.py` and `test_guide_metrics_and_launcher.py` read them from there, so they run
on any checkout. Where the guides' text is at hand (`VLA_GUIDES_DIR`: the folder of the saved guide pages),
`test_guide_facts_are_the_guides_text` reads the facts from the text again and compares; elsewhere it skips with
`GUIDES_NOT_SET`. `VLA_GUIDES_DIR=DIR python apps/train_embodied/tests/guide_facts.py` rewrites the data file.

The guides are web pages saved as text: most lost their indentation, so a snippet is rebuilt from its lines with
the composed config as the schema (a key goes under the deepest open section that has it).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

GUIDES_ENV = "VLA_GUIDES_DIR"
#: The skip of the text check where the guides are not at hand; the root conftest.py accepts exactly this reason
#: under VLA_REQUIRE_ALL=1 (an input that was not given, not a broken install).
GUIDES_NOT_SET = "VLA_GUIDES_DIR is not set: the guide facts in data/guide_facts.yaml are not compared with the guides' text"
FACTS_FILE = Path(__file__).resolve().parent / "data" / "guide_facts.yaml"
#: Each guide's saved page in the guides' folder.
GUIDES = {
    "libero": "000_1e6a3f0d559aefd8.txt",
    "maniskill": "001_ab7455a39fcb519e.txt",
    "metaworld": "002_ce25052214b76d20.txt",
    "overview": "003_680f6f78d78cb51d.txt",
    "robotwin": "004_27b5491e56a14261.txt",
}
#: Text that starts a part of the RoboTwin guide about the OpenPI (pi0 / pi0.5) models -> whether it is about them.
OPENPI_MARKERS = {
    "For OpenPI configurations": True,
    "OpenVLA-OFT Key Configuration": False,
    "5Key Configuration": True,
}
_HEADER = """\
# The reference user guides' facts that the guide tests check (test_guide_snippets.py,
# test_guide_metrics_and_launcher.py), per guide: YAML snippets (nested), settings given in the prose
# ([key, value, about the OpenPI models]), launcher commands ([script, config]), config files named, metric names.
# Written by guide_facts.py from the guides' text; test_guide_facts_are_the_guides_text compares them with the
# text where VLA_GUIDES_DIR is set.
"""

_KEY = r"[A-Za-z_][A-Za-z0-9_]*(?:[/,][A-Za-z_][A-Za-z0-9_]*)*"
_SCALAR = r'"[^"]*"|\'[^\']*\'|\[[^\]]*\]|\$\{[^}]*\}[^\s#]*|[^\s#]+'
_YAML_LINE = re.compile(rf"^\s*({_KEY}):(?:\s+({_SCALAR}))?\s*(?:#.*)?$")
_DOTTED = re.compile(
    r"((?:actor|algorithm|env|fsdp|runner|rollout|cluster)(?:\.[A-Za-z_*][A-Za-z0-9_]*)+): "
    r'("[^"]*"|\[[^\]]*\]|True|False|true|false|-?\d+(?:\.\d+)?|[a-z_]+(?=:))'
)
_METRIC = re.compile(r"(?<![\w/])((?:train/)?(?:actor|critic|rollout|env)/[a-z_]+|train/[a-z_]+)")


def load_facts() -> dict[str, dict[str, Any]]:
    """The facts of every guide, from this repository's data file."""
    return yaml.safe_load(FACTS_FILE.read_text(encoding="utf-8"))


def guides_dir() -> Path | None:
    """The guides' folder named by VLA_GUIDES_DIR, or None where it is not set."""
    value = os.environ.get(GUIDES_ENV, "")
    return Path(value) if value else None


# ---- reading the facts from the guides' text


def schema() -> dict[str, Any]:
    """The composed base config's key tree, plus the guides' spellings (their homes are in config.aliases)."""
    from train_embodied.config.aliases import ENV_EXTRA_ALIASES
    from train_embodied.config.defaults import base_config

    tree = base_config()
    for split in ("train", "eval"):
        for key in ENV_EXTRA_ALIASES:
            tree["env"][split][key] = {}
    tree["actor"]["model"]["OpenPI"] = {}
    return tree


def _fits(key: str, node_schema: Any) -> bool:
    if node_schema == {}:  # a free mapping (placement strings, adapter options, OpenPI settings)
        return True
    return isinstance(node_schema, dict) and key in node_schema


def rebuild(pairs: list[tuple[str, str | None]], tree: dict[str, Any]) -> list[dict[str, Any]]:
    """Nested snippets from flattened `(key, value)` lines: each key goes under the deepest open section whose
    schema has it and that does not hold it yet. A repeated leaf after an "or" comment starts a variant."""
    root: dict[str, Any] = {}
    variants = []
    stack: list[tuple[dict[str, Any], Any]] = [(root, tree)]
    for key, value in pairs:
        if key == "#or":
            variants.append(yaml.safe_load(yaml.safe_dump(root)))
            continue
        for depth in range(len(stack) - 1, -1, -1):
            node, sch = stack[depth]
            if _fits(key, sch) and (key not in node or (variants and value is not None)):
                break
        else:
            raise AssertionError(f"snippet line {key!r} fits no open section")
        del stack[depth + 1 :]
        if value is None:
            child: dict[str, Any] = {}
            node[key] = child
            stack.append((child, sch.get(key, {}) if isinstance(sch, dict) and sch else {}))
        else:
            node[key] = yaml.safe_load(value)
    return [*variants, root]


def yaml_blocks(text: str) -> list[list[tuple[str, str | None]]]:
    """Runs of consecutive YAML-looking lines (comments inside a run kept as markers)."""
    blocks: list[list[tuple[str, str | None]]] = []
    run: list[tuple[str, str | None]] = []
    for line in text.splitlines():
        stripped = line.strip()
        m = _YAML_LINE.match(line)
        if m:
            run.append((m.group(1), m.group(2)))
            continue
        if stripped.startswith("#") and run:
            if stripped.lstrip("# ").lower() == "or":
                run.append(("#or", None))
            elif stripped.endswith(".yaml:"):  # "# In env/train/NAME.yaml:" the file's content follows
                run.append(("#file", stripped.split()[-1].rstrip(":")))
            continue
        if run:
            blocks.append(run)
        run = []
    if run:
        blocks.append(run)
    return blocks


def rst_yaml_blocks(text: str) -> list[dict[str, Any]]:
    """The `.. code-block:: yaml` blocks of a reStructuredText guide, parsed as they are."""
    out = []
    for m in re.finditer(r"\.\. code-block:: yaml\n\s*\n((?:[ \t]+.*\n|\s*\n)+)", text):
        body = "\n".join(line[3:] if line.startswith("   ") else line for line in m.group(1).splitlines())
        out.append(yaml.safe_load(body))
    return out


def inline_runs(text: str) -> list[list[tuple[str, str | None]]]:
    """YAML written on one line (`...True:runner: task_type: embodied logger: log_path: ...`)."""
    out = []
    for line in text.splitlines():
        m = re.search(r"(runner): (task_type: .*)$", line)
        if m:
            pairs = re.findall(rf"({_KEY}):(?:\s+(\"[^\"]*\"|\[[^\]]*\]|-?[\w.]+)(?=\s|$))?", m.group(0))
            out.append([(k, v or None) for k, v in pairs])
    return out


def snippets_of(guide: str, text: str) -> list[dict[str, Any]]:
    """Every YAML snippet of the guide's text, nested."""
    tree = schema()
    if guide == "overview":
        return rst_yaml_blocks(text)
    snippets = []
    for block in [*yaml_blocks(text), *inline_runs(text)]:
        if block[0][0] not in tree and block[0][0] not in ("env/train", "env/eval"):
            continue  # prose that happens to look like "Word: word"
        if block[0][0] in ("env/train", "env/eval"):  # a defaults list, then an env file's content
            cut = next(i for i, (k, _) in enumerate(block) if k == "#file")
            snippets.append({"defaults": [{k: v} for k, v in block[:cut]]})
            snippets += [{"env": {"train": s}} for s in rebuild(block[cut + 1 :], tree["env"]["train"])]
            continue
        snippets += rebuild(block, tree)
    return snippets


def settings_of(text: str) -> list[list[Any]]:
    """The `key: value` settings the guide's prose gives (`algorithm.n_chunk_steps: 8`, `env.*.task_config...`),
    each as [key, value, whether the guide gives it for the OpenPI (pi0 / pi0.5) models]."""
    markers = sorted(
        (m.start(), openpi) for marker, openpi in OPENPI_MARKERS.items() for m in re.finditer(marker, text)
    )
    out: list[list[Any]] = []
    for m in _DOTTED.finditer(text):
        key, value = m.groups()
        openpi = next((o for pos, o in reversed(markers) if pos < m.start()), False)
        for k in (
            [key.replace("env.*.", f"env.{s}.") for s in ("train", "eval")] if "env.*." in key else [key]
        ):
            if [k, value, openpi] not in out:
                out.append([k, value, openpi])
    # "it is recommended to use enable_offload: True" (RoboTwin's GPU memory): the env's offload
    out += [[f"env.{k}", v, False] for k, v in re.findall(r"use (enable_offload): (True)", text)]
    return out


def facts_of(guide: str, text: str) -> dict[str, Any]:
    """Every fact of one guide's text that the guide tests check."""
    launchers = [[s, n] for s, n in re.findall(r"bash examples/embodiment/(\w+\.sh) (\w+)", text)]
    metrics = set(_METRIC.findall(text)) - {"env/train", "env/eval"}  # the defaults-list groups, not metrics
    return {
        "snippets": snippets_of(guide, text),
        "settings": settings_of(text),
        "launchers": [x for i, x in enumerate(launchers) if x not in launchers[:i]],
        "config_files": sorted(set(re.findall(r"examples/embodiment/config/(\w+)\.yaml", text))),
        "metrics": sorted(metrics),
    }


def facts_from_guides(folder: Path) -> dict[str, dict[str, Any]]:
    """The facts of every guide, read from the guides' text in `folder`."""
    out = {}
    for guide, name in GUIDES.items():
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(f"{GUIDES_ENV}={folder}: the {guide} guide {name} is not there")
        out[guide] = facts_of(guide, path.read_text(encoding="utf-8"))
    return out


def write_facts(facts: dict[str, dict[str, Any]]) -> None:
    FACTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    body = yaml.safe_dump(facts, sort_keys=False, width=110, allow_unicode=True, default_flow_style=None)
    FACTS_FILE.write_text(_HEADER + body, encoding="utf-8")


def main() -> int:
    folder = guides_dir()
    if folder is None:
        print(f"guide_facts.py: set {GUIDES_ENV} to the folder of the saved guide pages", file=sys.stderr)
        return 2
    write_facts(facts_from_guides(folder))
    print(f"wrote {FACTS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
