"""Overrides Hydra's grammar cannot read, found one by one before composition, each with the quoted form that works.

Hydra reads `key=value` with its own grammar: an unquoted value may not hold spaces, quotes, `;()=`, non-ASCII
letters and a few more, and a comma makes a sweep (several runs). Its messages name neither the cause nor the
fix (`LexerNoViableAltException: key=café`, `mismatched input '(' expecting <EOF>`, `Ambiguous value for
argument`). Here each failing override gets one line with the argument to paste instead: the value quoted for
Hydra, the whole argument quoted for a POSIX shell.
"""

from __future__ import annotations

import shlex

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

_NEEDS_QUOTES = "spaces, quotes, commas, ';()=[]{}' and non-ASCII letters need quotes in a Hydra value"


def override_syntax_problems(overrides: list[str]) -> list[str]:
    """One line per override Hydra cannot read as one setting (or reads as a sweep), naming it and giving the
    quoted argument that sets the same string; [] when every override reads."""
    parser = OverridesParser.create()
    problems = []
    for item in overrides:
        try:
            (parsed,) = parser.parse_overrides([item])
        except HydraException as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            problems.append(f"{item!r} is not an override Hydra can read ({reason}): {_fix(item)}")
            continue
        if parsed.is_sweep_override():
            problems.append(
                f"{item!r}: a comma makes Hydra read a sweep of several runs, which this command does not run: "
                f"{_fix(item, list_form=True)}"
            )
    return problems


def _fix(item: str, *, list_form: bool = False) -> str:
    key, sep, value = item.partition("=")
    if not sep or not key or any(c in key for c in " '\","):
        return f"write it as key=value ({_NEEDS_QUOTES})"
    escaped = _escape_key_commas(value)
    if escaped is not None:  # a mapping whose key holds commas (`{env,rollout,actor: all}`): escape them
        return f"a comma inside a mapping's key is escaped with a backslash; pass {_shell_quoted(f'{key}={escaped}')}"
    string = _shell_quoted(f"{key}={hydra_quoted(value)}")
    if value.startswith(("[", "{")) and not list_form:
        return f"check its brackets (a list is [a,b], a mapping {{k: v}}), or pass {string} for the string"
    text = f"{_NEEDS_QUOTES}; pass {string}"
    if list_form and not any(c in value for c in " '\";()=[]{}") and value.isascii():
        text += f" for the string, or {_shell_quoted(f'{key}=[{value}]')} for a list"
    return text


def _shell_quoted(arg: str) -> str:
    """`arg` as one POSIX shell word: in double quotes where nothing in it is special there (the readable form),
    else as `shlex.quote` writes it."""
    if not any(c in arg for c in '"$`\\!'):
        return f'"{arg}"'
    return shlex.quote(arg)


def hydra_quoted(value: str) -> str:
    """`value` as one quoted Hydra string (single quotes; double quotes when the value holds a single quote and no
    double quote; otherwise single quotes with `\\'` escapes)."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _escape_key_commas(value: str) -> str | None:
    """`{env,rollout,actor: all, x: 1}` -> `{env\\,rollout\\,actor: all, x: 1}` (Hydra reads a comma in a key as
    a separator unless escaped); None for a value that is not one flat mapping with such a key."""
    if not (value.startswith("{") and value.endswith("}")) or any(c in value[1:-1] for c in "{}[]'\""):
        return None
    entries, pending = [], []
    for part in value[1:-1].split(","):
        pending.append(part)
        if ":" in part:
            entries.append("\\,".join(pending))
            pending = []
    if pending or len(entries) == value.count(",") + 1:
        return None  # an entry without a value, or no key holds a comma
    return "{" + ",".join(entries) + "}"
