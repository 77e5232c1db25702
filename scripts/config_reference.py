"""Write the configuration reference page (docs/reference/configuration.md) from the config code.

Every key a run accepts is a key of the base config every shipped config starts from
(`train_embodied.config.defaults.base_config`). Each section of it is found by shape among the dataclasses of the
`train_embodied.config` package and the dataclasses their fields hold (`vla_envs.EnvConfig` for `env.train` /
`env.eval`): a dataclass is a section's home when the section has every one of its fields. A key's row gives:

- its type (the field's annotation) and default (the base config's value);
- the values the validation allows, in the words of its one-line error: each key is set to a value no check
  accepts (an unknown name, a large negative number) on a valid config and the error naming that key is kept;
- its meaning: the docstring written directly under the field, or the field's entry under `Attributes:` in the
  class docstring.

The keys spelled as the reference documents spell them (`train_embodied.config.aliases`) get a table of their own.

    python scripts/config_reference.py            # rewrite the page
    python scripts/config_reference.py --check    # exit 1 if the page is stale or a field has no sentence
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import importlib
import inspect
import itertools
import pkgutil
import re
import sys
import textwrap
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "reference" / "configuration.md"
CONFIG_PACKAGE = "train_embodied.config"
#: A value of the key's type that no check accepts, per type: the validation's error then says what it allows.
_PROBE_TEXT = "probe-value-no-check-accepts"
_PROBE_NUMBER = -1_000_000_007
#: How the validation's one-line errors say what is allowed, after `key=value`.
_ALLOWED = re.compile(r"^ (?:is invalid: (?:expected .*|(?P<rule>.+))|is not one of: (?P<names>.+))$")


@dataclass
class Row:
    """One key of the reference."""

    key: str
    type: str
    default: Any
    allowed: str
    meaning: str


@dataclass
class Section:
    """One section of the config (a node of the base config's tree) and the dataclasses that are its home."""

    path: str
    homes: list[type]
    rows: list[Row]


# ---- the dataclasses of the config code


def config_dataclasses() -> list[type]:
    """Every dataclass defined in the modules of the config package, then those their fields hold (recursively)."""
    package = importlib.import_module(CONFIG_PACKAGE)
    found: list[type] = []
    names = [CONFIG_PACKAGE] + [
        m.name for m in pkgutil.walk_packages(package.__path__, prefix=f"{CONFIG_PACKAGE}.")
    ]
    for name in names:
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and obj.__module__ == name:
                found.append(obj)
    queue = list(found)
    while queue:
        for tp in field_types(queue.pop()).values():
            for cls in _dataclasses_in(tp):
                if cls not in found:
                    found.append(cls)
                    queue.append(cls)
    return found


def field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _dataclasses_in(tp: Any) -> list[type]:
    if inspect.isclass(tp) and dataclasses.is_dataclass(tp):
        return [tp]
    return [cls for arg in typing.get_args(tp) for cls in _dataclasses_in(arg)]


def _section_class(tp: Any) -> type | None:
    """The dataclass a field of type `tp` holds as a nested section, if it is one."""
    return tp if inspect.isclass(tp) and dataclasses.is_dataclass(tp) else None


def fits(cls: type, node: dict[str, Any]) -> dict[str, str] | None:
    """{field: key of `node`} if `node` is a home of `cls` (every field is a key, a nested section a child node
    that fits its class), else None."""
    out: dict[str, str] = {}
    for name, tp in field_types(cls).items():
        nested = _section_class(tp)
        if nested is None:
            if name not in node:
                return None
            out[name] = name
            continue
        key = name if isinstance(node.get(name), dict) else None
        if key is None or fits(nested, node[key]) is None:  # held under another name (`video` as `video_cfg`)
            key = next(
                (k for k, v in node.items() if isinstance(v, dict) and v and fits(nested, v) is not None),
                None,
            )
        if key is None:
            return None
        out[name] = key
    return out


# ---- what a field means: its docstring


def field_sentences(cls: type) -> dict[str, str]:
    """{field: its sentence}: the docstring under the field, else its `Attributes:` entry in the class docstring."""
    out = _attributes_section(inspect.getdoc(cls) or "")
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    for stmt, after in itertools.pairwise(body):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            out[stmt.target.id] = " ".join(inspect.cleandoc(after.value.value).split())
    return out


def _attributes_section(doc: str) -> dict[str, str]:
    out: dict[str, str] = {}
    lines = doc.splitlines()
    if "Attributes:" not in lines:
        return out
    current = None
    for line in lines[lines.index("Attributes:") + 1 :]:
        if line and not line.startswith(" "):
            break
        m = re.match(r"^    (\w+)(?: \([^)]*\))?: (.*)$", line)
        if m:
            current = m.group(1)
            out[current] = m.group(2).strip()
        elif current and line.startswith("        "):
            out[current] += " " + line.strip()
    return out


def summary(cls: type) -> str:
    """The first paragraph of a class docstring, on one line."""
    doc = inspect.getdoc(cls) or ""
    return " ".join(doc.split("\n\n")[0].split())


# ---- type, default, allowed values


def type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        args = [type_name(a) for a in typing.get_args(tp) if a is not Ellipsis]
        return f"list of {' / '.join(dict.fromkeys(args))}" if args else "list"
    if origin is dict or tp is dict:
        return "mapping"
    if tp is type(None):
        return "null"
    if tp is typing.Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


def yaml_value(value: Any) -> str:
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def valid_config() -> dict[str, Any]:
    """The base config with what it leaves to each shipped config filled in: a config the validation accepts."""
    from train_embodied.config.defaults import base_config
    from vla_envs import list_env_types

    cfg = base_config()
    for split in ("train", "eval"):
        cfg["env"][split]["env_type"] = list_env_types()[0]
    return cfg


def validation_errors(cfg: dict[str, Any]) -> list[str]:
    from train_embodied.config import ConfigError, build_train_config

    try:
        build_train_config(copy.deepcopy(cfg), check_paths=False)
    except ConfigError as err:
        return err.errors
    return []


def _set(cfg: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(cfg)
    node = out
    *parents, leaf = path.split(".")
    for part in parents:
        node = node[part]
    node[leaf] = value
    return out


def allowed_values(cfg: dict[str, Any], path: str, tp: Any) -> str:
    """What the validation allows for `path`, in its own words ("" where no check refuses a value of its type)."""
    union = typing.get_origin(tp) in (typing.Union, types.UnionType)
    args = [a for a in (typing.get_args(tp) if union else (tp,)) if a is not type(None)]
    if args == [bool]:
        return "true, false"
    if str in args:
        probe: Any = _PROBE_TEXT
    elif int in args:
        probe = _PROBE_NUMBER
    elif float in args:
        probe = float(_PROBE_NUMBER)
    elif typing.get_origin(args[0]) is list and typing.get_args(args[0]) == (str,):
        probe = [_PROBE_TEXT]  # a list of names: each item is checked
    else:
        return ""
    for error in validation_errors(_set(cfg, path, probe)):
        for key in (path, f"{path}[]"):
            head = f"{key}={(probe[0] if isinstance(probe, list) else probe)!r}"
            if error.startswith(head):
                m = _ALLOWED.match(error[len(head) :])
                if m and (m.group("rule") or m.group("names")):
                    if m.group("names"):
                        return "one of: " + m.group("names")
                    rule = m.group("rule")
                    return "" if str(_PROBE_NUMBER) in rule or _PROBE_TEXT in rule else rule
    return ""


# ---- the page


def alias_pairs() -> list[tuple[str, str]]:
    """(the reference documents' key, its home here), each once."""
    from train_embodied.config import aliases

    pairs = [*aliases.OVERRIDE_ALIASES, *aliases.FILE_ALIASES]
    return list(dict.fromkeys(pairs))


def _leaves(tree: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out += _leaves(value, path + ".")
        else:
            out.append(path)
    return out


def sections() -> tuple[list[Section], list[str], list[str]]:
    """The config's sections with their rows; the keys that are only the documents' spellings; and one line per
    field without a sentence or key without a home."""
    from train_embodied.config.defaults import base_config

    tree = base_config()
    classes = config_dataclasses()
    aliased = {theirs for theirs, _ in alias_pairs()}
    cfg = valid_config()
    problems: list[str] = []
    found: list[Section] = []
    alias_only: list[str] = []

    def walk(node: dict[str, Any], path: str) -> None:
        if path and all(f"{path}.{leaf}" in aliased for leaf in _leaves(node)):
            alias_only.extend(f"{path}.{leaf}" for leaf in _leaves(node))
            return
        homes = [(cls, keys) for cls in classes if (keys := fits(cls, node)) is not None]
        owned: dict[str, tuple[type, str]] = {}
        for cls, keys in homes:
            for name, key in keys.items():
                owned.setdefault(key, (cls, name))
        rows, nested = [], []
        for key, value in node.items():
            full = f"{path}.{key}" if path else key
            if key in owned:
                cls, name = owned[key]
                tp = field_types(cls)[name]
                meaning = field_sentences(cls).get(name, "")
                if not meaning:
                    problems.append(f"{cls.__module__}.{cls.__qualname__}.{name} ({full}) has no sentence")
                if _section_class(tp) is not None:
                    nested.append((value, full))
                    continue
                rows.append(Row(full, type_name(tp), value, allowed_values(cfg, full, tp), meaning))
            elif isinstance(value, dict) and value:
                nested.append((value, full))
            elif full in aliased:
                alias_only.append(full)
            else:
                problems.append(f"{full}: no dataclass field defines it and it is no documents' spelling")
        if rows:
            found.append(Section(path, [cls for cls, _ in homes], rows))
        for value, full in nested:
            walk(value, full)

    walk(tree, "")
    return found, alias_only, problems


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _generic_rows(section: Section, generic: Any) -> tuple[Any, ...]:
    rows = [(generic(r.key), r.type, r.default, r.meaning) for r in section.rows]
    return generic(section.path), section.homes, rows


def _merged_allowed(a: str, b: str) -> str | None:
    """The allowed values of a key that both splits have: one text, or the one a split's check gives (the other
    split's key may be another key's spelling, checked there); None where they disagree."""
    if a == b or not b:
        return a
    return b if not a else None


def _split_sections(found: list[Section]) -> list[Section]:
    """Sections with the same keys under `env.train` and `env.eval` are written once, as `env.<split>`."""

    def generic(text: str) -> str:
        return re.sub(r"^env\.(train|eval)\b", "env.<split>", text)

    out: list[Section] = []
    for section in found:
        key = _generic_rows(section, generic)
        twin = next((i for i, s in enumerate(out) if _generic_rows(s, generic) == key), None)
        allowed = (
            [_merged_allowed(a.allowed, b.allowed) for a, b in zip(out[twin].rows, section.rows)]
            if twin is not None
            else []
        )
        if twin is None or None in allowed:
            out.append(section)
            continue
        first = out[twin]
        rows = [dataclasses.replace(r, key=generic(r.key), allowed=a) for r, a in zip(first.rows, allowed)]
        out[twin] = Section(generic(first.path), first.homes, rows)
    return out


def render(found: list[Section], alias_only: list[str]) -> str:
    lines = [
        "# Configuration reference",
        "",
        "<!-- Written by scripts/config_reference.py from the config code; edit the field docstrings, not this page."
        " -->",
        "",
        "Every key a run accepts, by section. Set a key in a config file or on the command line "
        "(`vla-train CONFIG algorithm.gamma=0.98`). The type is the field's, the default is the value every shipped "
        "config starts from (a shipped config then sets what differs: `vla-train CONFIG --cfg` prints the composed "
        "result), and *allowed* is what the validation accepts, in the words of the one-line error it gives "
        "otherwise. `env.<split>` stands for `env.train` and `env.eval`, which have the same keys.",
        "",
    ]
    for section in _split_sections(found):
        lines += [f"## `{section.path}`", ""]
        for cls in section.homes:
            lines += [f"{summary(cls)} (`{cls.__module__}.{cls.__qualname__}`)", ""]
        lines += ["| key | type | default | allowed | meaning |", "|---|---|---|---|---|"]
        for row in section.rows:
            cells = [
                f"`{row.key}`",
                _cell(row.type),
                f"`{_cell(yaml_value(row.default))}`",
                _cell(row.allowed) or "-",
                _cell(row.meaning),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "## The reference documents' spellings",
        "",
        "Keys as the reference framework's documents spell them, each accepted and read at its home here "
        "(`train_embodied.config.aliases`). Given both ways with different values, on one command line or in one "
        "config file, a run is refused with one line naming both.",
        "",
        "| documents' key | home here |",
        "|---|---|",
    ]
    lines += [f"| `{theirs}` | `{ours}` |" for theirs, ours in alias_pairs()]
    lines.append("")
    missing = sorted(set(alias_only) - {theirs for theirs, _ in alias_pairs()})
    assert not missing, missing
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale or incomplete")
    args = parser.parse_args(argv)
    found, alias_only, problems = sections()
    for line in problems:
        print(f"config_reference: {line}", file=sys.stderr)
    text = render(found, alias_only)
    if args.check:
        stale = not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != text
        if stale:
            print(
                f"config_reference: {PAGE.relative_to(REPO)} is stale: run python scripts/config_reference.py"
            )
        return 1 if stale or problems else 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(REPO)} ({sum(len(s.rows) for s in found)} keys)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
