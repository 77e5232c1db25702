"""The RoboTwin process bounds a sub-env's step by the env's `call_timeout_s` (configurable: a loaded 2-core machine
can take minutes for a step), and past it says which option to raise."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from vla_envs.robotwin.server import Host

STUB = Path(__file__).parent / "robotwin_stub"


class SlowSubEnv:
    """Stands for one of RoboTwin's sub-envs: `step(action)` returns the dict RoboTwin's step returns."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def step(self, action):
        time.sleep(self.seconds)
        return {"obs": {}, "reward": 0.0, "terminated": False, "truncated": False, "info": {}}


def _host(step_timeout_s: float, step_seconds: float) -> Host:
    host = Host()
    host.spec = {"step_timeout_s": step_timeout_s}
    host.venv = SimpleNamespace(
        env_thread_pool=ThreadPoolExecutor(2), envs=[SlowSubEnv(step_seconds), SlowSubEnv(step_seconds)]
    )
    return host


def test_a_step_longer_than_the_bound_names_the_option() -> None:
    with pytest.raises(TimeoutError, match=r"more than 0.1 s \(raise the env's extra.call_timeout_s"):
        _host(step_timeout_s=0.1, step_seconds=0.5).step_rows([0, 0], [0, 1])


def test_a_step_within_the_bound_returns_robotwins_results() -> None:
    result = _host(step_timeout_s=5.0, step_seconds=0.2).step_rows([0, 0], [0, 1])
    assert result[1] == [0.0, 0.0] and result[2] == [False, False]  # rewards, terminated


def test_the_runtime_sends_the_call_timeout(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `RoboTwinProcess` asks the child to build with: the env's `call_timeout_s` as the step bound (the
    child itself is the stub checkout's, stopped at its first call)."""
    from vla_envs import EnvConfig
    from vla_envs.robotwin import runtime
    from vla_envs.robotwin.options import resolve_options

    for d in ("assets/objects", "assets/background_texture", "assets/embodiments"):
        (tmp_path / d).mkdir(parents=True)
    sent = {}

    class Stop(Exception):
        pass

    def first_call(self, cmd, *args, **kwargs):
        sent[cmd] = args
        raise Stop

    monkeypatch.setattr(runtime.RoboTwinProcess, "_call", first_call)
    cfg = EnvConfig(
        env_type="robotwin",
        task="place_empty_cup",
        num_envs=1,
        extra={"robotwin_path": str(STUB), "assets_path": str(tmp_path), "call_timeout_s": 321.0},
    )
    with pytest.raises(Stop):
        runtime.RoboTwinProcess(resolve_options(cfg), n_envs=1, env_seeds=[0])
    assert sent["init"][0]["step_timeout_s"] == 321.0
