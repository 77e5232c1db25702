"""MetricLogger's swanlab backend: an offline swanlab run in `<log_dir>/swanlab` holds the config and the keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from vla_infra import MetricLogger


def test_swanlab_offline_writes_run_files(tmp_path: Path) -> None:
    pytest.importorskip("swanlab")
    with MetricLogger(
        ["swanlab"],
        log_dir=tmp_path,
        project_name="vla-rl-test",
        experiment_name="swanlab-offline",
        config={"algorithm": {"gamma": 0.5}},
        swanlab_mode="offline",
    ) as logger:
        logger.log({"train/loss": 0.5, "actor/pg_clipfrac": 0.25}, step=1)
        logger.log({"train/loss": 0.4}, step=2)
    (run,) = (tmp_path / "swanlab").glob("run-*")
    data = b"".join(p.read_bytes() for p in run.glob("run-*.swanlab"))
    assert b"train/loss" in data and b"actor/pg_clipfrac" in data
    assert "gamma" in (run / "files" / "config.yaml").read_text()


def test_swanlab_is_a_named_backend_with_a_clear_error_without_the_package(tmp_path: Path) -> None:
    try:
        import swanlab  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"pip install 'vla-infra\[swanlab\]'"):
            MetricLogger(["swanlab"], log_dir=tmp_path)
    else:
        with pytest.raises(ValueError, match="unknown entries"):
            MetricLogger(["swanlabb"], log_dir=tmp_path)
