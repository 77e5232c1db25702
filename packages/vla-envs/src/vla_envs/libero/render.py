"""Camera frames rendered only when an observation returns them (`extra['lazy_render']`).

robosuite samples each camera observable on its own clock inside every control step (a policy decision with
`action_repeat` k and a reset's settle steps run several), and each sample renders the scene, while an
observation returns only the last one. `LazyCameraFrames` replaces the cameras' sensors with one that keeps a copy
of the simulator's `MjData` at the sample (about 1 ms) instead of rendering (30-300 ms on llvmpipe), and `frames()`
renders the last sample of each camera from its copy when an observation needs it. Rendering reads only the model
and the `MjData` it is given, so the frame is the one robosuite would have rendered at that moment, bit for bit;
the clocks, the physics and everything else robosuite computes are untouched.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np


class _DataView:
    """What robosuite's render context reads of its `MjSim.data`: the wrapped `mujoco.MjData`."""

    def __init__(self, data: Any) -> None:
        self._data = data


class LazyCameraFrames:
    """Deferred rendering of the camera observables `names` of a robosuite env.

    Args:
        env: The robosuite env (LIBERO's `OffScreenRenderEnv(...).env`).
        names: Camera observable names (e.g. "agentview_image").
    """

    def __init__(self, env: Any, names: list[str]) -> None:
        self.env = env
        self.names = list(names)
        self._originals: dict[str, Any] = {}
        self._pending: dict[str, Any] = {}  # name -> MjData copy of the last sample not rendered yet
        self._frames: dict[str, np.ndarray] = {}  # name -> the last rendered frame
        self.install()

    def install(self) -> None:
        """Put the deferring sensors in place (again, if robosuite rebuilt its observables)."""
        for name in self.names:
            observable = self.env._observables[name]
            if getattr(observable._sensor, "_lazy_of", None) is self:
                continue
            original = observable._sensor
            self._originals[name] = original
            frame = self._frames.get(name)
            if frame is None:
                frame = np.zeros(observable._data_shape, dtype=np.uint8)

            def deferred(obs_cache: Any, name: str = name, frame: np.ndarray = frame) -> np.ndarray:
                self._pending[name] = copy.copy(self.env.sim.data._data)
                return frame

            deferred.__modality__ = original.__modality__  # type: ignore[attr-defined]
            deferred._lazy_of = self  # type: ignore[attr-defined]
            observable._sensor = deferred

    def uninstall(self) -> None:
        """Give the cameras their own sensors back (they render at every sample again)."""
        for name, original in self._originals.items():
            self.env._observables[name]._sensor = original
        self._originals.clear()
        self._pending.clear()

    def frames(self) -> dict[str, np.ndarray]:
        """The frame each camera observable holds now, as robosuite would have rendered it: name -> uint8 [H, W, 3]
        (raw, bottom row first). Renders the cameras sampled since the last call."""
        context = self.env.sim._render_context_offscreen
        for name, data in self._pending.items():
            observable = self.env._observables[name]
            live = context.data
            context.data = _DataView(data)
            try:
                raw = self._originals[name]({})
            finally:
                context.data = live
            frame = np.array(observable._filter(observable._corrupter(raw)))
            observable._current_observed_value = frame
            self._frames[name] = frame
        self._pending.clear()
        return {name: self._frames[name] for name in self.names if name in self._frames}
