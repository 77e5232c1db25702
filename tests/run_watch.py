"""A `vla-train` process under test, watched from outside: its output, the processes it started (followed while it
runs, so that what it leaves behind after it ends can be found), its run folder's checkpoints and worker pids."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from vla_infra import checkpoint_problem


def like_a_terminal_started_it() -> None:
    """`preexec_fn` of a run the tests stop with signals: SIGINT and SIGTERM at their defaults and unblocked, as a
    shell starts a command. A child inherits an ignored or blocked signal, and a Python started with SIGINT ignored
    never turns Ctrl-C into KeyboardInterrupt; the test process may have either from an earlier test's libraries."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


class WatchedRun:
    """`python -m train_embodied.cli CONFIG *overrides runner.logger.log_dir=<log_dir>` in its own session."""

    def __init__(self, config: str, overrides: list[str], log_dir: Path) -> None:
        self.log_dir = log_dir
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "train_embodied.cli",
                config,
                *overrides,
                f"runner.logger.log_dir={log_dir}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=like_a_terminal_started_it,
        )
        self.seen: dict[int, psutil.Process] = {}  # every process below the run, while it ran
        self.names: dict[int, str] = {}
        self.out: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
        ]
        self.err_lines: list[str] = []
        self._readers.append(
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err_lines), daemon=True)
        )
        for reader in self._readers:
            reader.start()
        self._follow = threading.Thread(target=self._follow_tree, daemon=True)
        self._follow.start()

    @staticmethod
    def _read(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))

    def _follow_tree(self) -> None:
        try:
            root = psutil.Process(self.proc.pid)
        except psutil.Error:
            return
        while self.proc.poll() is None:
            try:
                found = root.children(recursive=True)
            except psutil.Error:
                found = []
            for pid in self.worker_pids():
                with contextlib.suppress(psutil.Error):
                    found.append(psutil.Process(pid))
            for proc in found:
                proc = self.seen.setdefault(proc.pid, proc)
                with contextlib.suppress(psutil.Error):  # a new process may still be a fork before its exec
                    self.names[proc.pid] = proc.name()
            time.sleep(0.2)

    def worker_pids(self) -> list[int]:
        path = self.log_dir / "worker_pids.json"
        try:
            return [int(p) for group in json.loads(path.read_text()).values() for p in group]
        except (OSError, ValueError):
            return []

    def wait_for_checkpoint(self, step: int, timeout_s: float = 600.0) -> Path:
        path = self.log_dir / "checkpoints" / f"global_step_{step}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if path.is_dir() and checkpoint_problem(path) is None:
                return path
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"the run ended before checkpoint {step}:\n" + "\n".join(self.err_lines[-20:])
                )
            time.sleep(0.1)
        raise AssertionError(f"no checkpoint {step} within {timeout_s} s")

    def signal(self, sig: int, *, group: bool = False) -> float:
        """Send `sig` to the driver (or its whole process group, as a terminal's Ctrl-C does); returns the time."""
        if group:
            os.killpg(self.proc.pid, sig)
        else:
            os.kill(self.proc.pid, sig)
        return time.monotonic()

    def wait(self, timeout_s: float) -> int:
        try:
            code = self.proc.wait(timeout=timeout_s)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for reader in self._readers:
            reader.join(timeout=10)
        return code

    @property
    def err(self) -> str:
        return "\n".join(self.err_lines)

    def left_behind(self, within_s: float) -> list[str]:
        """The processes the run started that still run after waiting up to `within_s` seconds for them to end."""
        deadline = time.monotonic() + within_s
        while True:
            alive = []
            for proc in self.seen.values():
                try:
                    if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                        alive.append(f"{proc.pid} {proc.name()} {' '.join(proc.cmdline())[:80]}")
                except psutil.Error:
                    continue
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.2)

    def kill_left_behind(self) -> None:
        for proc in self.seen.values():
            try:
                proc.kill()
            except psutil.Error:
                continue
