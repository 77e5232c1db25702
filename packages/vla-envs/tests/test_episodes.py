"""`EpisodeTracker`: episode metrics, same-step autoreset of the observations and held rows, with numpy
observations and with the torch observations of the ManiSkill GPU env (its row merge)."""

from __future__ import annotations

import numpy as np
import pytest

from vla_envs.episodes import EpisodeTracker


def _obs(value: float, b: int = 3) -> dict:
    return {
        "images": np.full((b, 2, 2, 3), value, np.uint8),
        "wrist_images": None,
        "states": np.full((b, 2), value, np.float32),
        "task_descriptions": [f"t{value:g}"] * b,
    }


def test_metrics_of_ended_episodes_and_counters_restart() -> None:
    tracker = EpisodeTracker(3, auto_reset=True)
    tracker.start(_obs(0))
    tracker.add(np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 0.0]]), np.array([2, 2, 2]), np.zeros((3, 2), bool))
    assert tracker.end(np.zeros(3, bool))["return"].tolist() == [0.0, 0.0, 0.0]
    success = np.array([[False, True], [False, False], [False, False]])
    tracker.add(np.array([[0.0, 2.0], [1.0, 0.0], [0.0, 0.0]]), np.array([2, 1, 2]), success)
    assert tracker.succeeded().tolist() == [True, False, False]
    metrics = tracker.end(np.array([True, True, False]))
    assert metrics["return"].tolist() == [3.0, 2.0, 0.0]
    assert metrics["episode_len"].tolist() == [4.0, 3.0, 0.0]
    assert metrics["success_once"].tolist() == [1.0, 0.0, 0.0]
    np.testing.assert_allclose(metrics["reward"], [0.75, 2.0 / 3.0, 0.0])
    assert all(m.dtype == np.float32 for m in metrics.values())
    # the ended rows start again from zero; the third keeps counting
    assert tracker.episode_len.tolist() == [0.0, 0.0, 4.0] and not tracker.succeeded().any()


def test_autoreset_gives_ended_rows_their_next_first_obs() -> None:
    tracker = EpisodeTracker(3, auto_reset=True)
    tracker.start(_obs(0))
    calls = []

    def reset_rows(rows: np.ndarray) -> dict:
        calls.append(rows.tolist())
        return _obs(9)

    ended = np.array([False, True, False])
    obs, final = tracker.next_obs(_obs(1), _obs(5), ended, reset_rows)
    assert calls == [[1]]
    assert obs["states"][:, 0].tolist() == [1, 9, 1] and obs["task_descriptions"] == ["t1", "t9", "t1"]
    assert final["states"][:, 0].tolist() == [1, 5, 1]
    assert not tracker.held.any() and tracker.obs is obs
    tracker.next_obs(_obs(2), _obs(2), np.zeros(3, bool), reset_rows)
    assert calls == [[1]]  # nothing ended: no reset


def test_without_autoreset_an_ended_row_is_held_showing_its_final_obs_until_start() -> None:
    tracker = EpisodeTracker(3, auto_reset=False)
    with pytest.raises(RuntimeError, match="reset"):
        tracker.last_obs()
    tracker.start(_obs(0))
    obs, _ = tracker.next_obs(_obs(1), _obs(5), np.array([True, False, False]), lambda rows: 1 / 0)
    assert tracker.held.tolist() == [True, False, False]
    assert obs["states"][:, 0].tolist() == [5, 1, 1]
    # the simulator's obs of a held row (it keeps stepping) is not shown
    obs, _ = tracker.next_obs(_obs(2), _obs(2), np.array([False, False, True]), lambda rows: 1 / 0)
    assert tracker.held.tolist() == [True, False, True]
    assert obs["states"][:, 0].tolist() == [5, 2, 2]
    tracker.hold(np.array([False, True, False]))
    assert tracker.held.all()
    tracker.start(_obs(0))
    assert not tracker.held.any()


def test_torch_observations_of_the_gpu_env() -> None:
    torch = pytest.importorskip("torch")
    from vla_envs.maniskill.gpu_env import _merge_rows

    def tobs(value: float) -> dict:
        o = _obs(value)
        return {**o, "images": torch.as_tensor(o["images"]), "states": torch.as_tensor(o["states"])}

    tracker = EpisodeTracker(3, auto_reset=False, merge=_merge_rows)
    tracker.start(tobs(0))
    obs, final = tracker.next_obs(tobs(1), tobs(5), np.array([False, True, False]), lambda rows: 1 / 0)
    assert isinstance(obs["states"], torch.Tensor)
    assert obs["states"][:, 0].tolist() == [1, 5, 1] and final["states"][:, 0].tolist() == [1, 5, 1]
    obs, _ = tracker.next_obs(tobs(2), tobs(2), np.zeros(3, bool), lambda rows: 1 / 0)
    assert obs["states"][:, 0].tolist() == [2, 5, 2] and obs["images"][1].max() == 5
