"""Where RoboTwin runs: its `VectorEnv` hosted in a child process (`server.py`), started with the interpreter
of the environment where RoboTwin is installed.

RoboTwin 2.0 comes either as the PyPI package `rlinf-robotwin-runtime` (module `robotwin`, assets under
`ROBOTWIN_ASSETS_ROOT`) or as a git checkout of its `RLinf_support` branch (`ROBOTWIN_PATH`, assets under
`ASSETS_PATH`). Its pins (mplib 0.2.1, numpy 1.26, sapien) usually clash with a training environment, so it
lives in its own virtual environment (`scripts/setup_robotwin.sh`) and the adapter talks to it over a socket:
`extra['robotwin_python']` (or `$ROBOTWIN_PYTHON`) names that interpreter, default this one. The child also
bounds what RoboTwin leaves unbounded: building the envs (RoboTwin retries seeds forever when a task cannot be
set up) and every call have a timeout, after which the child is killed and a clear error is raised.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from vla_envs.config import EnvConfig
from vla_envs.robotwin.options import RoboTwinOptions, resolve_options
from vla_envs.setup_errors import SimulatorSetupError

SERVER = Path(__file__).with_name("server.py")
INSTALL_HELP = (
    "run `bash scripts/setup_robotwin.sh && export ROBOTWIN_VENV=$PWD/.venv-robotwin "
    "ROBOTWIN_PYTHON=$PWD/.venv-robotwin/bin/python ROBOTWIN_ASSETS_ROOT=$PWD/.venv-robotwin/robotwin-assets` in "
    "the repository (RoboTwin's runtime from PyPI with a stand-in robot; a config's extra.robotwin_python and "
    "extra.assets_path take precedence over these variables; the real assets: `robotwin-download-assets` of that "
    "environment, or a checkout of RoboTwin's RLinf_support branch as ROBOTWIN_PATH; see the vla-envs README)"
)
CHECKOUT_FILES = ("envs/__init__.py", "robotwin/envs/vector_env.py", "task_config/_embodiment_config.yml")
ASSET_DIRS = ("assets/embodiments", "assets/objects", "assets/background_texture")


class RoboTwinUnavailableError(SimulatorSetupError):
    """RoboTwin, its assets or its Python requirements are missing, or it cannot build the envs here."""


class RoboTwinProcessDied(RuntimeError):
    """RoboTwin's child process ended (killed, crashed) or did not answer a call within `call_timeout_s` (it was
    killed then): the envs it hosted are gone, a new process can host them again."""


def check_setup(cfg: EnvConfig) -> None:
    """Raise `RoboTwinUnavailableError` (one line) when this machine lacks what the env of `cfg` needs, before any
    RoboTwin process starts: the checkout's files, the asset folders, and an interpreter that finds RoboTwin."""
    opts = resolve_options(cfg)
    checkout = check_checkout(opts)
    check_assets(opts)
    python = check_python(opts, checkout)
    if python != sys.executable and checkout is None:
        found = subprocess.run(
            [python, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('robotwin') is None)"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=60, env=_foreign_env(),
        )  # fmt: skip
        if found.returncode != 0:
            raise RoboTwinUnavailableError(
                f"extra['robotwin_python'] (or ROBOTWIN_PYTHON)={python!r} cannot import robotwin (RoboTwin's "
                f"runtime is not installed there): {INSTALL_HELP}"
            )


def _foreign_env() -> dict[str, str]:
    """This process's environment without the variables that would show this environment's packages to another
    interpreter."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    return env


def check_checkout(opts: RoboTwinOptions) -> Path | None:
    """The RoboTwin checkout of `opts` (None: the installed package), checked for the files the adapter uses."""
    if not opts.robotwin_path:
        return None
    root = Path(opts.robotwin_path).expanduser()
    if not root.is_dir():
        raise RoboTwinUnavailableError(f"ROBOTWIN_PATH={str(root)!r} is not a directory: {INSTALL_HELP}")
    wanted = (*CHECKOUT_FILES, f"envs/{opts.task}.py")
    missing = [f for f in wanted if not (root / f).is_file()]
    if missing:
        raise RoboTwinUnavailableError(
            f"ROBOTWIN_PATH={str(root)!r} is not a RoboTwin checkout of the RLinf_support branch: missing "
            f"{missing}: {INSTALL_HELP}"
        )
    return root


def check_assets(opts: RoboTwinOptions) -> Path:
    """The asset root of `opts` (the directory holding assets/), checked for RoboTwin's asset folders."""
    if not opts.assets_path:
        raise RoboTwinUnavailableError(
            "env_type='robotwin' needs RoboTwin's assets: none of extra['assets_path'], ROBOTWIN_ASSETS_ROOT, "
            f"ASSETS_PATH, ROBOTWIN_PATH is set: {INSTALL_HELP}"
        )
    root = Path(opts.assets_path).expanduser().resolve()
    missing = [d for d in ASSET_DIRS if not (root / d).is_dir()]
    if missing:
        raise RoboTwinUnavailableError(
            f"RoboTwin assets are missing under assets_path={str(root)!r} (extra['assets_path'] or "
            f"ROBOTWIN_ASSETS_ROOT): no {', '.join(missing)}: {INSTALL_HELP}"
        )
    return root


def check_python(opts: RoboTwinOptions, checkout: Path | None) -> str:
    """The interpreter that runs RoboTwin, checked to exist (and, for this one, to find RoboTwin)."""
    python = opts.robotwin_python or sys.executable
    if not os.access(python, os.X_OK):
        raise RoboTwinUnavailableError(
            f"extra['robotwin_python'] (or ROBOTWIN_PYTHON)={python!r} is not an executable: {INSTALL_HELP}"
        )
    if python == sys.executable and checkout is None and importlib.util.find_spec("robotwin") is None:
        raise RoboTwinUnavailableError(
            f"RoboTwin is not installed in this environment ({sys.executable}) and neither "
            f"extra['robotwin_python'] (ROBOTWIN_PYTHON) nor ROBOTWIN_PATH is set: {INSTALL_HELP}"
        )
    return python


class RoboTwinProcess:
    """RoboTwin's VectorEnv in a child process: `reset(env_idx, env_seeds) -> raw obs`, `step(actions[, rows])`,
    `get_obs()`, `expert(rows)`, `attr(name)`, `run(file, function)`, `close()`. Errors of the child arrive as RoboTwinUnavailableError / ValueError /
    RuntimeError with its message; a call past its timeout, or a sub-env step inside the child past its bound, kills
    the child, and such a call or a call to a child that died raises `RoboTwinProcessDied`."""

    def __init__(self, opts: RoboTwinOptions, n_envs: int, env_seeds: list[int]) -> None:
        self.opts = opts
        checkout = check_checkout(opts)
        assets = check_assets(opts)
        python = check_python(opts, checkout)
        ours, theirs = socket.socketpair()
        self._log = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115 (open while the child lives)
        # a foreign interpreter must not see this environment's packages
        env = _foreign_env() if python != sys.executable else dict(os.environ)
        self._proc = subprocess.Popen(
            [python, str(SERVER), "--fd", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, env=env,
        )  # fmt: skip
        theirs.close()
        self._conn = Connection(ours.detach())
        self._closed = False
        self._died: str | None = (
            None  # why the child died or was killed (later calls raise RoboTwinProcessDied)
        )
        spec = {
            "checkout": str(checkout) if checkout else None,
            "assets_root": str(assets),
            "environ": {"ROBOTWIN_ASSETS_ROOT": str(assets), "ASSETS_PATH": str(assets)},
            "camera_shader": opts.camera_shader,
            "task_config": opts.task_config,
            "n_envs": n_envs,
            "env_seeds": env_seeds,
            "instruction_type": opts.instruction_type,
            "dense_reward": opts.dense_reward,
            "step_timeout_s": opts.call_timeout_s,  # a sub-env's step, inside the child
        }
        try:
            self._call("init", spec, timeout=opts.construct_timeout_s, what="building RoboTwin's VectorEnv")
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ calls
    def reset(self, env_idx: list[int], env_seeds: list[int]) -> list[dict[str, Any]]:
        return self._call("reset", env_idx, env_seeds)

    def get_obs(self) -> list[dict[str, Any]]:
        return self._call("get_obs")

    def step(self, actions: Any, rows: list[int] | None = None) -> tuple:
        """RoboTwin's step for every env, or for `rows` only (`actions` [len(rows), horizon, 14]; the lists it
        returns then hold those rows, in that order)."""
        if rows is None:
            return self._call("step", actions)
        return self._call("step_rows", actions, [int(r) for r in rows])

    def expert(self, rows: list[int]) -> list[dict[str, Any]]:
        """RoboTwin's own expert (`play_once`) on the rows' current scenes: per row the commanded 14-D state after
        every physics step (`path` [T + 1, 14]), `success`, `plan_success`, `error`. The scenes are used up: reset
        the rows before stepping them."""
        return self._call("expert", [int(r) for r in rows])

    @property
    def pid(self) -> int:
        """The child process's id."""
        return int(self._proc.pid)

    @property
    def closed(self) -> bool:
        return self._closed

    def attr(self, name: str) -> Any:
        """A picklable attribute of RoboTwin's VectorEnv, by dotted name (`"envs.0.task.take_action_cnt"`)."""
        return self._call("attr", name)

    def run(self, file: str | Path, function: str, **kwargs: Any) -> Any:
        """`function(vector_env, **kwargs)` of a python file, run in the RoboTwin process (diagnostics, tests)."""
        return self._call("run", str(file), function, kwargs)

    def close(self) -> None:
        """Close RoboTwin's envs and end the child (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._proc.poll() is None:
                self._conn.send(("close",))
                if self._conn.poll(60):
                    self._conn.recv()
        except (OSError, EOFError):
            pass
        finally:
            self._conn.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._log.close()

    # ------------------------------------------------------------------ internals
    def log_tail(self, n_chars: int = 1500) -> str:
        """The server's own messages (RoboTwin errors it caught) and the end of the child's stdout/stderr."""
        self._log.flush()
        self._log.seek(0)
        text = self._log.read().decode(errors="replace")
        own = [line for line in text.splitlines() if line.startswith("[robotwin-server]")][-10:]
        return "\n".join([*own, "...", text[-n_chars:]])

    def _call(self, cmd: str, *args: Any, timeout: float | None = None, what: str | None = None) -> Any:
        if self._died is not None:
            raise RoboTwinProcessDied(self._died)
        if self._closed:
            raise RuntimeError("the RoboTwin env is closed")
        timeout = self.opts.call_timeout_s if timeout is None else timeout
        what = what or f"RoboTwin's {cmd}"
        try:
            self._conn.send((cmd, *args))
            ready = self._conn.poll(timeout)
        except (OSError, EOFError):
            ready = False
        if not ready:
            alive = self._proc.poll() is None
            tail = self.log_tail()
            self._proc.kill()
            self._proc.wait()
            self.close()
            reason = (
                f" did not finish within {timeout:.0f} s (RoboTwin retries the next seed forever when a task "
                "cannot be set up: missing object assets, or an expert that cannot plan for the embodiment; "
                "raise extra['construct_timeout_s'] / extra['call_timeout_s'] for a slow machine)"
                if alive
                else f": the RoboTwin process ended (exit code {self._proc.returncode})"
            )
            error = RoboTwinUnavailableError if cmd == "init" else RoboTwinProcessDied
            self._died = f"{what}{reason}; its last output:\n{tail}"
            raise error(self._died)
        try:
            reply = self._conn.recv()
        except EOFError:
            tail = self.log_tail()
            self.close()
            self._died = f"{what}: the RoboTwin process ended (exit code {self._proc.returncode}); its last output:\n{tail}"
            raise (RoboTwinUnavailableError if cmd == "init" else RoboTwinProcessDied)(self._died) from None
        if reply[0] == "ok":
            return reply[1]
        _, kind, message = reply
        # a thread of the child is stuck in RoboTwin (a step past its bound): only a new process runs the envs again
        if kind == "hung":
            tail = self.log_tail()
            self._proc.kill()
            self._proc.wait()
            self.close()
            self._died = f"{what}: {message}; the RoboTwin process was killed; its last output:\n{tail}"
            raise RoboTwinProcessDied(self._died)
        if kind == "unavailable":
            raise RoboTwinUnavailableError(f"{message}: {INSTALL_HELP}")
        if kind == "config":
            raise ValueError(message)
        raise RuntimeError(f"{what} failed in the RoboTwin process: {message}")
