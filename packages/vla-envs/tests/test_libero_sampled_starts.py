"""LIBERO's sampled starts (`extra['init_states']='sampled'`) are draws from the distribution of LIBERO's 50 saved
initial states: same spread of the arm's joints (robosuite's default joint noise), the objects and the open drawer,
reproducible per (task, trial), and none of them a saved state."""

from __future__ import annotations

import numpy as np
import pytest

from vla_envs import EnvConfig  # first: sets MUJOCO_GL before robosuite imports mujoco

pytest.importorskip(
    "libero.libero", reason="LIBERO not importable: pip install 'vla-envs[libero]'", exc_type=ImportError
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:The 'warn' method is deprecated:DeprecationWarning"),  # robosuite 1.4
]
TASK = "KITCHEN_SCENE10_close_the_top_drawer_of_the_cabinet"
ARM = slice(1, 8)  # the flattened MuJoCo state: time, then the 7 arm joints
DRAWER = 38  # the top drawer's slide joint (qpos address 37, after time)


def test_sampled_starts_spread_like_the_saved_initial_states() -> None:
    from vla_envs.libero.options import resolve_options
    from vla_envs.libero.sim import LiberoSim
    from vla_envs.libero.suites import resolve_tasks

    cfg = EnvConfig(
        env_type="libero", task=TASK, num_envs=1, envs_per_worker=0, render=False, num_trials_per_task=60000,
        extra={"init_states": "sampled", "num_settle_steps": 0},
    )  # fmt: skip
    sim = LiberoSim(cfg, resolve_tasks(TASK, None), resolve_options(cfg))
    try:
        sim.reset(0)
        env = sim.current.env
        saved = sim.current.init_states
        starts = []
        for trial in range(40):
            sim.reset(50000 + trial)
            starts.append(env.get_sim_state())
        sim.reset(50003)
        again = env.get_sim_state()
    finally:
        sim.close()
    starts = np.array(starts)
    assert starts.shape[1] == saved.shape[1]
    np.testing.assert_array_equal(again, starts[3])  # a trial is one start, whatever ran before
    # the arm: robosuite's 0.02 rad Gaussian noise per joint, as in the saved states (std 0.017-0.023 there)
    assert np.all((starts[:, ARM].std(0) > 0.01) & (starts[:, ARM].std(0) < 0.03)), starts[:, ARM].std(0)
    assert np.abs(starts[:, ARM].mean(0) - saved[:, ARM].mean(0)).max() < 0.02
    # the drawer opens within the cabinet's open range [-0.16, -0.14], like the saved states
    assert np.all((starts[:, DRAWER] > -0.16) & (starts[:, DRAWER] < -0.14))
    assert np.all((saved[:, DRAWER] > -0.16) & (saved[:, DRAWER] < -0.14))
    # every dimension that varies across saved states varies across sampled ones, and no more than 2x as much
    varies = saved.std(0) > 1e-6
    ratio = starts.std(0)[varies] / saved.std(0)[varies]
    assert np.all((ratio > 0.5) & (ratio < 2.0)), ratio
    assert np.all(starts.std(0)[~varies] < 1e-6)
    # no sampled start is a saved one
    distances = np.abs(starts[:, None, 1:] - saved[None, :, 1:]).max(-1)
    assert distances.min() > 1e-3
