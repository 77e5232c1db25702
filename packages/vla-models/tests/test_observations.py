"""Bad inputs at ``predict`` / ``sft_loss`` are refused naming the observation key: task descriptions that are
not strings, NaN/inf states or float images, a batch of zero rows, states of another batch size."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vla_models import OpenVLAOFTConfig, build_policy, check_observation


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return build_policy(OpenVLAOFTConfig.tiny(action_dim=4, use_proprio=True, proprio_dim=4))


def _bad(obs: dict, key: str, value) -> dict:
    return {**obs, key: value}


def _nan_states(obs: dict) -> np.ndarray:
    states = obs["states"].copy()
    states[1, 2] = np.nan
    return states


def _inf_states(obs: dict) -> np.ndarray:
    states = obs["states"].copy()
    states[0, 0] = np.inf
    return states


CASES = [
    ("non-string-task", lambda o: _bad(o, "task_descriptions", ["open", 3]), r"row 1 is int \(3\)"),
    (
        "task-not-a-list",
        lambda o: _bad(o, "task_descriptions", "open the drawer"),
        "must be a list of strings",
    ),
    (
        "nan-state",
        lambda o: _bad(o, "states", _nan_states(o)),
        r"obs\['states'\] holds NaN or inf \(rows \[1\]\)",
    ),
    (
        "inf-state",
        lambda o: _bad(o, "states", _inf_states(o)),
        r"obs\['states'\] holds NaN or inf \(rows \[0\]\)",
    ),
    (
        "inf-float-image",
        lambda o: _bad(o, "images", np.full(o["images"].shape, np.inf, dtype=np.float32)),
        r"obs\['images'\] holds NaN or inf",
    ),
    (
        "states-other-batch",
        lambda o: _bad(o, "states", o["states"][:1]),
        "first dimension must be the 2 rows",
    ),
    (
        "zero-rows",
        lambda o: {**o, "images": o["images"][:0], "states": o["states"][:0], "task_descriptions": []},
        "obs has 0 rows",
    ),
]


@pytest.mark.parametrize(("make", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_observations_are_refused_naming_the_key(policy, make_obs_fn, make, message) -> None:
    obs = make(make_obs_fn(2))
    with pytest.raises(ValueError, match=message):
        policy.predict(obs, mode="greedy")
    with pytest.raises(ValueError, match=message):
        policy.sft_loss(obs, np.zeros((2, 1, 4), dtype=np.float32))


def test_good_observations_pass_and_values_of_zero_rows_are_defined(policy, make_obs_fn) -> None:
    obs = make_obs_fn(2)
    assert check_observation(obs) == 2
    assert torch.isfinite(policy.predict(obs, mode="greedy").actions).all()
    empty = {**obs, "images": obs["images"][:0], "states": obs["states"][:0], "task_descriptions": []}
    assert policy.values(empty).shape == (0,)
