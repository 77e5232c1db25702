"""Worker handles: simulators in a subprocess (pipes, timeouts, crash detection) or in this process."""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import traceback
from multiprocessing.connection import Connection
from typing import Any

from vla_envs.checks import check_env_setup
from vla_envs.config import EnvConfig
from vla_envs.gl import configure_mujoco_gl
from vla_envs.runner import EnvRunner
from vla_envs.setup_errors import SimulatorSetupError
from vla_envs.sim import SimSpec


class WorkerDied(RuntimeError):
    """A worker process exited, was killed, or did not answer within `worker_timeout_s`."""


class SimulatorUnavailable(RuntimeError):
    """A worker's simulators could not be (re)started `MAX_CONSECUTIVE_FAILURES` times in a row: the run ends."""


class WorkerError(RuntimeError):
    """A worker raised a Python exception (a bug or bad input, not a crash: it is not restarted)."""


def resolve(ref: str) -> Any:
    """Import "module:attr"."""
    module_name, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def build_runner(cfg: EnvConfig, spec: SimSpec, rows: list[int]) -> EnvRunner:
    """Build the simulators of `rows` and wrap them in an EnvRunner. The env's set-up check runs here first: a
    worker on a machine that lacks what the driver's machine has (a node without the EGL library) raises the same
    one-line `SimulatorSetupError` the driver's check would."""
    configure_mujoco_gl()
    check_env_setup(cfg)
    sims = resolve(spec.builder)(cfg, spec, rows)
    return EnvRunner(cfg, sims)


def _dispatch(runner: EnvRunner, cmd: str, payload: Any) -> Any:
    if cmd == "reset":
        return runner.reset(payload)
    if cmd == "reset_hold":
        return runner.reset(*payload)
    if cmd == "chunk":
        return runner.run_chunk(*payload)
    if cmd == "pid":
        return os.getpid()
    raise ValueError(f"unknown worker command {cmd!r}")


def worker_main(conn: Connection, cfg: EnvConfig, spec: SimSpec, rows: list[int]) -> None:
    """Subprocess entry point: build the sims, then answer commands until "close" or EOF."""
    # llvmpipe spawns one raster thread per core by default; with several workers on few cores that
    # oversubscribes the CPU. Keep the user's setting if there is one.
    os.environ.setdefault("LP_NUM_THREADS", str(cfg.extra.get("lp_num_threads", 1)))
    try:
        runner = build_runner(cfg, spec, rows)
    except SimulatorSetupError as exc:  # this machine lacks something: the parent raises it as it is
        conn.send(("setup", exc))
        conn.close()
        return
    except Exception:  # report the build error to the parent, then exit
        conn.send(("error", traceback.format_exc()))
        conn.close()
        return
    conn.send(("ok", None))
    try:
        while True:
            try:
                cmd, payload = conn.recv()
            except EOFError:
                break
            if cmd == "close":
                break
            try:
                conn.send(("ok", _dispatch(runner, cmd, payload)))
            except Exception:
                conn.send(("error", traceback.format_exc()))
    finally:
        runner.close()
        conn.close()


class ProcessWorker:
    """A subprocess simulating `rows`; commands go over a pipe, replies are awaited with a timeout."""

    def __init__(self, worker_id: int, cfg: EnvConfig, spec: SimSpec, rows: list[int]) -> None:
        self.worker_id = worker_id
        self.cfg = cfg
        self.spec = spec
        self.rows = rows
        self.process: mp.process.BaseProcess | None = None
        self.conn: Connection | None = None

    def start(self) -> None:
        """Start the process (does not wait for it to be ready; `recv` does)."""
        ctx = mp.get_context(self.cfg.start_method)
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=worker_main,
            args=(child_conn, self.cfg, self.spec, self.rows),
            name=f"vla-env-worker-{self.worker_id}",
            daemon=True,
        )
        self.process.start()
        child_conn.close()
        self.conn = parent_conn

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def exitcode(self) -> int | None:
        return None if self.process is None else self.process.exitcode

    def send(self, cmd: str, payload: Any = None) -> None:
        """Send a command; raise WorkerDied if the pipe is broken."""
        assert self.conn is not None
        try:
            self.conn.send((cmd, payload))
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError) as exc:
            raise WorkerDied(f"send failed: {exc!r}") from exc

    def recv(self, timeout: float) -> Any:
        """Wait for a reply; raise WorkerDied on EOF/timeout, WorkerError on a Python exception in the worker, and
        the worker's own `SimulatorSetupError` when it could not build its simulators for lack of something."""
        assert self.conn is not None
        try:
            if not self.conn.poll(timeout):
                raise WorkerDied(f"no reply within worker_timeout_s={timeout}")
            status, payload = self.conn.recv()
        except (EOFError, ConnectionResetError, OSError) as exc:
            raise WorkerDied(f"pipe closed: {exc!r}") from exc
        if status == "error":
            raise WorkerError(f"env worker {self.worker_id} (rows {self.rows}) raised:\n{payload}")
        if status == "setup":
            raise payload
        return payload

    def kill(self) -> None:
        """Kill the process (if alive) and close the pipe."""
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        if self.process is not None:
            self.process.join(timeout=5)
        if self.conn is not None:
            self.conn.close()

    def close(self, timeout: float = 5.0) -> None:
        """Ask the worker to exit; kill it if it does not."""
        if self.process is None:
            return
        try:
            if self.conn is not None and not self.conn.closed:
                self.conn.send(("close", None))
        except (BrokenPipeError, OSError):
            pass
        self.process.join(timeout=timeout)
        self.kill()
        self.process = None


class LocalWorker:
    """Same interface as ProcessWorker, running the simulators in this process (debugging)."""

    def __init__(self, worker_id: int, cfg: EnvConfig, spec: SimSpec, rows: list[int]) -> None:
        self.worker_id = worker_id
        self.rows = rows
        self.runner = build_runner(cfg, spec, rows)
        self._reply: Any = None
        self.pid = os.getpid()
        self.exitcode = None

    def start(self) -> None:
        self._reply = None  # built eagerly in __init__; "ready" reply below

    def send(self, cmd: str, payload: Any = None) -> None:
        self._reply = _dispatch(self.runner, cmd, payload)

    def recv(self, timeout: float) -> Any:
        return self._reply

    def kill(self) -> None:
        self.close()

    def close(self, timeout: float = 0.0) -> None:
        self.runner.close()
