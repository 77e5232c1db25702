"""The run folder (`runner.logger.log_dir`): a name that stays inside `log_path`, a folder the run can write, one
run at a time (a lock naming the process that holds it), no link in it that leads out of it, no fresh run over
another run's or a model's files, writes that are atomic (`write_atomic`), and a saved `config.json` without the
values of environment variables (`${oc.env:...}`: tokens and passwords are not written into shared run folders)."""

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
#: what a run's start leaves in its folder before the run checks it: the lock, and the log scripts/run_embodiment.sh
#: writes there as it starts `vla-train`
_STARTED_FILES = frozenset({LOCK_FILE, "run_embodiment.log"})
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


def link_problem(path: str | Path, key: str = "runner.logger.log_dir") -> str | None:
    """One line naming the first symbolic link inside the run folder `path` whose target lies outside it (a run
    that writes `metrics.jsonl`, `config.json`, `summary.json`, `policy/`, ... would write through it onto a file
    the user did not name), else None. Links that stay inside the folder are allowed; links to folders are not
    entered."""
    root = Path(path)
    if not root.is_dir():
        return None
    real_root = root.resolve()
    for folder, subfolders, files in os.walk(root):  # does not follow links
        for name in sorted(subfolders + files):
            entry = Path(folder) / name
            if entry.is_symlink() and not entry.resolve().is_relative_to(real_root):
                return (
                    f"{key}={str(path)!r} is invalid: {entry} is a link to {entry.resolve()}, outside the run "
                    "folder, and a run never writes through one: remove the link or give the run another folder"
                )
    return None


def occupied_problem(
    path: str | Path, resume_dir: str | None, key: str = "runner.logger.log_dir"
) -> str | None:
    """One line if a run starting in `path` would write over files that are not its own, else None: a model folder
    (`config.json` and weights at its top), or (a fresh run: no `runner.resume_dir` that resumes in this folder)
    any non-empty folder, such as a finished run, whose checkpoints and metrics the new run would mix with its own.
    What a start leaves there (the lock, the launcher's log) does not count."""
    root = Path(path)
    if not root.is_dir():
        return None
    entries = sorted(
        e.name
        for e in root.iterdir()
        if e.name not in _STARTED_FILES and not e.name.startswith(".write-probe-")
    )
    if not entries:
        return None
    fix = (
        "give the run a new or empty folder (without runner.logger.log_dir a run gets "
        "<runner.logger.log_path>/<experiment_name>/<time>)"
    )
    if (root / "config.json").is_file() and any(root.glob("*.safetensors")):
        return f"{key}={str(path)!r} is invalid: it is a model folder (config.json and weights), not a run folder: {fix}"
    own = resume_dir == "auto" or (resume_dir and Path(resume_dir).resolve().is_relative_to(root.resolve()))
    if own:
        return None
    shown = ", ".join(entries[:4]) + (f" and {len(entries) - 4} more" if len(entries) > 4 else "")
    return (
        f"{key}={str(path)!r} is invalid: it already holds {shown}, and a fresh run would mix its files with "
        f"those: to continue the run there set runner.resume_dir=auto, else {fix}"
    )


def write_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` through a temporary file beside it and a rename: a reader sees the old file or the
    new one, never part of one, and a link at `path` is replaced, not written through. The temporary file is
    removed when the write fails (a full disk)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
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
