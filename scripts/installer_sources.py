"""Print, one per line, the uv arguments that make uv take packages from where pip is configured to take them.

uv does not read pip's configuration (`pip config list`: pip.conf files and PIP_* variables). `scripts/setup.sh`
passes what this prints to `uv pip install`, so that uv and pip resolve from the same indexes, find-links folders
and constraint files:

    --index-url URL              pip's index-url (the last one set: PIP_INDEX_URL over user over global)
    --extra-index-url URL        each of pip's extra-index-url entries
    --find-links PATH_OR_URL     each of pip's find-links entries
    --constraint FILE            each of pip's constraint files
    --index-strategy unsafe-best-match   pip's rule: the best version over every index, not the first index's
    CERT=FILE / TIMEOUT=S        lines for the caller to turn into SSL_CERT_FILE / UV_HTTP_TIMEOUT

Usage: python3 scripts/installer_sources.py   (the interpreter whose pip configuration is read)
"""

from __future__ import annotations

import subprocess
import sys

# `pip config list` prints `<section>.<key>='<value>'`; sections :env: (PIP_* variables), global, install, ...
_SECTIONS = (":env:", "install", "global")  # most to least binding


def pip_config(text: str) -> dict[str, dict[str, str]]:
    """`pip config list` output -> {key: {section: value}}."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        name, sep, raw = line.partition("=")
        if not sep or "." not in name:
            continue
        section, _, key = name.rpartition(".")
        value = raw.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out.setdefault(key, {})[section] = value
    return out


def _values(config: dict[str, dict[str, str]], key: str) -> list[str]:
    """Every value of a list-valued key (whitespace-separated), over all sections, without repeats."""
    seen: list[str] = []
    for section in _SECTIONS:
        for item in config.get(key, {}).get(section, "").split():
            if item not in seen:
                seen.append(item)
    return seen


def _last(config: dict[str, dict[str, str]], key: str) -> str | None:
    """The binding value of a single-valued key."""
    for section in _SECTIONS:
        if section in config.get(key, {}):
            return config[key][section]
    return None


def uv_arguments(config: dict[str, dict[str, str]]) -> list[str]:
    """The uv arguments (and CERT= / TIMEOUT= lines) for pip configuration `config`."""
    args: list[str] = ["--index-strategy", "unsafe-best-match"]
    if index := _last(config, "index-url"):
        args += ["--index-url", index]
    for url in _values(config, "extra-index-url"):
        args += ["--extra-index-url", url]
    for link in _values(config, "find-links"):
        args += ["--find-links", link]
    for path in _values(config, "constraint"):
        args += ["--constraint", path]
    if cert := _last(config, "cert"):
        args.append(f"CERT={cert}")
    if timeout := _last(config, "default-timeout") or _last(config, "timeout"):
        args.append(f"TIMEOUT={timeout}")
    return args


def main() -> int:
    text = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    print("\n".join(uv_arguments(pip_config(text))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
