"""Ends what a private Ray instance leaves behind when its driver stops without shutting it down.

Ray ties its GCS server and raylet to the driver that started them (they die with it, even after a SIGKILL), but
the raylet's agents (dashboard agent, runtime-env agent) then try to report the raylet's death to the GCS that
died with it, and live on for about a minute; a worker process that is stopped (``SIGSTOP``) never notices at
all. This process watches the Ray processes the driver started and everything below them; when the driver's pipe
to it closes (the driver exited, or :class:`~vla_infra.RayBackend` shut Ray down and closed it), it SIGKILLs every
one of them still running, then exits.

    python ray_reaper.py ROOT_PID [ROOT_PID ...]     # stdin: the driver's end of a pipe

It imports only ``psutil`` (started as a file, not as part of the package, so it starts in a fraction of a second).
"""

from __future__ import annotations

import os
import select
import sys

import psutil

#: Seconds between two looks at the process tree (a process started and orphaned within one is not seen).
POLL_S = 0.5


def _tree(roots: list[int]) -> dict[int, psutil.Process]:
    """The root processes and all their descendants that are running now."""
    found: dict[int, psutil.Process] = {}
    for pid in roots:
        try:
            root = psutil.Process(pid)
            found[root.pid] = root
            for child in root.children(recursive=True):
                found[child.pid] = child
        except psutil.Error:
            continue
    return found


def watch(roots: list[int], stdin_fd: int) -> None:
    """Follow the tree below ``roots`` until ``stdin_fd`` reaches EOF, then kill what is left of it."""
    seen: dict[int, psutil.Process] = {}
    while True:
        seen = {pid: p for pid, p in seen.items() if p.is_running()}  # is_running also rules out a reused pid
        seen.update(_tree(roots))
        ready, _, _ = select.select([stdin_fd], [], [], POLL_S)
        if ready and not os.read(stdin_fd, 4096):
            break
    for proc in seen.values():
        try:
            if proc.is_running():
                proc.kill()
        except psutil.Error:
            continue


if __name__ == "__main__":
    watch([int(a) for a in sys.argv[1:]], sys.stdin.fileno())
