"""MetricLogger: tensorboard event files read back, wandb offline run files, throttled console lines."""

from __future__ import annotations

import io
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vla_infra.logging import ConsoleBackend, MetricLogger, StepTimer, namespaced


def test_tensorboard_scalars_read_back(tmp_path: Path) -> None:
    with MetricLogger(["tensorboard"], log_dir=tmp_path) as logger:
        for step in range(3):
            logger.log(
                {
                    "train/actor/policy_loss": torch.tensor(0.5 - 0.1 * step),
                    "env/success_once": np.float32(0.25 * step),
                    "my/custom_key": step,  # caller keys are kept as given
                    "rollout/flag": True,
                },
                step=step * 10,
            )
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert tags == {"train/actor/policy_loss", "env/success_once", "my/custom_key", "rollout/flag"}
    loss = acc.Scalars("train/actor/policy_loss")
    assert [e.step for e in loss] == [0, 10, 20]
    assert [e.value for e in loss] == pytest.approx([0.5, 0.4, 0.3])
    assert [e.value for e in acc.Scalars("env/success_once")] == pytest.approx([0.0, 0.25, 0.5])
    assert [e.value for e in acc.Scalars("rollout/flag")] == [1.0, 1.0, 1.0]


def test_bad_values_backends_and_config_keys_fail_clearly(tmp_path: Path) -> None:
    logger = MetricLogger(["console"], log_dir=tmp_path, console_stream=io.StringIO())
    with pytest.raises(ValueError, match="'env/return' must be a single number"):
        logger.log({"env/return": torch.ones(3)}, step=0)
    with pytest.raises(ValueError, match="'x' must be a single number"):
        logger.log({"x": "high"}, step=0)
    with pytest.raises(ValueError, match="step=-1"):
        logger.log({"x": 1.0}, step=-1)
    logger.close()
    with pytest.raises(RuntimeError, match="after close"):
        logger.log({"x": 1.0}, step=1)
    with pytest.raises(ValueError, match=r"unknown entries \['mlflow'\]"):
        MetricLogger(["tensorboard", "mlflow"], log_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown logger keys"):
        MetricLogger.from_config({"log_path": str(tmp_path), "logger_backend": ["console"]})


def test_from_config_uses_reference_keys(tmp_path: Path) -> None:
    cfg = {
        "log_path": str(tmp_path / "results"),
        "project_name": "rlinf",
        "experiment_name": "maniskill_ppo_openvla",
        "logger_backends": ["tensorboard"],
    }
    with MetricLogger.from_config(cfg) as logger:
        assert list(logger.backends) == ["tensorboard"]
        logger.log({"train/loss": 1.0}, step=1)
    assert list((tmp_path / "results" / "tensorboard").glob("events.out.tfevents.*"))
    # a single backend given as a string (not split into characters)
    with MetricLogger.from_config({**cfg, "logger_backends": "console"}, console_stream=io.StringIO()) as one:
        assert list(one.backends) == ["console"]


def test_console_is_compact_and_throttled() -> None:
    stream = io.StringIO()
    console = ConsoleBackend(console_interval_s=3600, stream=stream)
    console.log({"train/loss": 0.123456, "env/return": 2.0, "train/actor/lr": 1e-5}, step=1)
    console.log({"train/loss": 0.2}, step=2)  # within the interval: held back
    console.log({"train/loss": 0.3}, step=3)
    assert stream.getvalue().splitlines() == [
        "step 1 | env/return=2 | train/actor/lr=1e-05 train/loss=0.1235"
    ]
    console.close()  # the last held-back line is flushed
    assert stream.getvalue().splitlines()[-1] == "step 3 | train/loss=0.3"
    every = io.StringIO()
    unthrottled = ConsoleBackend(console_interval_s=0, stream=every)
    for step in range(3):
        unthrottled.log({"a": step}, step=step)
    assert len(every.getvalue().splitlines()) == 3


def test_wandb_offline_writes_run_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    with MetricLogger(
        ["wandb", "console"],
        log_dir=tmp_path,
        project_name="rlinf",
        experiment_name="unit",
        config={"algorithm": {"adv_type": "gae"}},
        console_stream=io.StringIO(),
    ) as logger:
        for step in range(1, 4):
            logger.log({"train/actor/policy_loss": 1.0 / step, "env/success_once": 0.5}, step=step)
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    # wandb's service process appends the records to the run file shortly after finish() returns.
    deadline = time.monotonic() + 30
    data = b""
    while time.monotonic() < deadline:
        data = b"".join(p.read_bytes() for p in runs[0].glob("run-*.wandb"))
        if b"env/success_once" in data:
            break
        time.sleep(0.1)
    assert b"train/actor/policy_loss" in data and b"env/success_once" in data


def test_name_helpers() -> None:
    assert namespaced("train/actor", {"policy_loss": 1.0}) == {"train/actor/policy_loss": 1.0}
    with pytest.raises(ValueError, match="prefix='train/'"):
        namespaced("train/", {"x": 1})
    timer = StepTimer()
    with timer("generate_rollouts"):
        time.sleep(0.01)
    with timer("generate_rollouts"):
        time.sleep(0.01)
    metrics = timer.metrics()
    assert list(metrics) == ["time/generate_rollouts"] and metrics["time/generate_rollouts"] >= 0.02
    assert timer.metrics() == {}
