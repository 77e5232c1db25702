"""The run folder (`runner.logger.log_dir`): a name that stays inside `log_path`, a folder the run can write, one
run at a time (a lock naming the process that holds it), and a saved `config.json` without the values of
environment variables (`${oc.env:...}`: tokens and passwords are not written into shared run folders)."""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

LOCK_FILE = "run.lock"
#: one folder name: letters, digits, '.', '_', '-', '+', '=', '@', not starting with '.' or '-'
_NAME = re.compile(r"^[A-Za-z0-9_+=@][A-Za-z0-9._+=@-]*$")


class RunFolderError(RuntimeError):
    """The run folder cannot be used (written, or locked by another run); the message is one line naming it."""


def name_problem(key: str, value: Any) -> str | None:
    """One line if `value` is not a single folder name (it would put the run outside `log_path`), else None."""
    text = str(value) if value is not None else ""
    if _NAME.match(text) and len(text) <= 200:
        return None
    return (
        f"{key}={text!r} is invalid: a run name is one folder name of letters, digits and '._+=@-' (not starting "
        "with '.' or '-', no '/' or '..'; at most 200 characters)"
    )


def folder_problem(path: str | Path, key: str = "runner.logger.log_dir") -> str | None:
    """One line if the run could not create or write `path`, else None: the nearest existing folder above it is
    not a folder, or a probe folder cannot be made in it (read-only file system, no permission; a real attempt,
    since permission bits do not bind root). The probe is removed at once."""
    target = Path(path).absolute()
    probe = target
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        return f"{key}={str(path)!r} is invalid: {probe} is not a folder"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write-probe-", dir=probe))
    except OSError as exc:
        return f"{key}={str(path)!r} is invalid: {probe} is not writable ({exc.strerror or exc})"
    return None


@contextmanager
def run_folder_lock(path: str | Path, key: str = "runner.logger.log_dir") -> Iterator[Path]:
    """Hold `<path>/run.lock` (an exclusive `flock`, released when the process ends, even when killed) for the
    run; the file says which process holds it.

    Raises:
        RunFolderError: the folder cannot be created or written, or another run holds the lock (naming the
            folder and that run's process id).
    """
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise RunFolderError(
            f"{key}={str(path)!r} cannot be written: {exc.strerror or exc} ({exc.filename or folder})"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise RunFolderError(
                f"{key}={str(path)!r} is in use by another run (pid {holder}, lock {folder / LOCK_FILE}): wait "
                "for it to finish or give this run another folder"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield folder
    finally:
        os.close(fd)  # releases the lock


def env_interpolations(cfg: Any) -> dict[str, str]:
    """`{resolved value: expression}` for every config value that reads an environment variable
    (`${oc.env:NAME}`, alone or inside a longer string); `cfg` is the composed, unresolved DictConfig."""
    from omegaconf import OmegaConf

    found: dict[str, str] = {}

    def walk(unresolved: Any, node: Any) -> None:
        if isinstance(unresolved, dict):
            items: Any = unresolved.items()
        elif isinstance(unresolved, list):
            items = enumerate(unresolved)
        else:
            return
        for key, raw in items:
            if isinstance(raw, (dict, list)):
                walk(raw, node[key])
            elif isinstance(raw, str) and "oc.env:" in raw:
                try:
                    value = node[key]  # resolves the interpolation
                except Exception:  # an unset variable without a default: the config check reports it
                    continue
                if isinstance(value, str) and value:
                    found[value] = raw

    walk(OmegaConf.to_container(cfg, resolve=False), cfg)
    return found


def redact_env_values(raw: Any, secrets: dict[str, str]) -> Any:
    """`raw` (a plain config) with each value in `secrets` replaced by the expression that produced it
    (`${oc.env:NAME}`): a string equal to it, or (for values of 4 characters or more) containing it. The saved
    config then says where the value came from, not what it is."""
    if isinstance(raw, dict):
        return {k: redact_env_values(v, secrets) for k, v in raw.items()}
    if isinstance(raw, list):
        return [redact_env_values(v, secrets) for v in raw]
    if isinstance(raw, str):
        if raw in secrets:
            return secrets[raw]
        for value in sorted(secrets, key=len, reverse=True):
            if len(value) >= 4:
                raw = raw.replace(value, secrets[value])
    return raw
