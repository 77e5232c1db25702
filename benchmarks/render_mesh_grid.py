"""MetaWorld step time with meshes drawn on a grid (`extra['render_mesh_grid']`) against the meshes as loaded.

    python benchmarks/render_mesh_grid.py [--grid 0.005] [--steps 100] [--rounds 3] [--bound 0.8]

Two in-process envs of the quickstart's setting (drawer-close-v3, 64 px, corner2, action repeat 4, far meshes
hidden), one with the grid, step the same random actions from the same start; timed blocks alternate between
them (so both see the same background load). Prints the median ms per step of each, their ratio (exit 1 above
`--bound`), the triangles drawn, and how far the images are apart (mean and max absolute difference in grey levels
over every step) while asserting the states stay identical.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from vla_envs import EnvConfig, make_env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=float, default=0.005)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bound", type=float, default=0.8, help="largest accepted ratio grid / as loaded")
    args = parser.parse_args()
    os.environ.setdefault("LP_NUM_THREADS", "1")  # the env workers' llvmpipe setting
    base = EnvConfig(
        env_type="metaworld", task="drawer-close-v3", num_envs=1, envs_per_worker=0, image_size=64,
        camera="corner2", action_repeat=4, max_episode_steps=10**6, extra={"hide_far_meshes": True},
    )  # fmt: skip
    envs = {
        "as loaded": make_env(base),
        "grid": make_env(base.replace(extra={"hide_far_meshes": True, "render_mesh_grid": args.grid})),
    }
    rng = np.random.default_rng(0)
    times: dict[str, list[float]] = {k: [] for k in envs}
    diffs: list[np.ndarray] = []
    try:
        obs = {k: env.reset(reset_state_ids=[0]) for k, env in envs.items()}
        faces = {k: int(env.workers[0].runner.sims[0]._current.env.model.mesh_facenum.sum()) for k, env in envs.items()}  # fmt: skip
        for _ in range(args.rounds):
            actions = rng.uniform(-1, 1, (args.steps, 1, 4)).astype(np.float32)
            images: dict[str, list[np.ndarray]] = {}
            for k, env in envs.items():
                t0 = time.perf_counter()
                steps = [env.step(a).obs for a in actions]
                times[k].append((time.perf_counter() - t0) / args.steps * 1e3)
                images[k] = [o["images"] for o in steps]
                obs[k] = steps[-1]
            np.testing.assert_array_equal(obs["grid"]["states"], obs["as loaded"]["states"])
            diffs += [np.abs(g.astype(np.int16) - f) for g, f in zip(images["grid"], images["as loaded"])]
    finally:
        for env in envs.values():
            env.close()
    ms = {k: statistics.median(v) for k, v in times.items()}
    ratio = ms["grid"] / ms["as loaded"]
    d = np.stack(diffs)
    print(f"cpu cores: {os.cpu_count()}  load average (1 min): {os.getloadavg()[0]:.1f}")
    for k in envs:
        print(
            f"{k:10s}: {ms[k]:.2f} ms per step (rounds: {', '.join(f'{x:.2f}' for x in times[k])}), {faces[k]} triangles"
        )
    print(f"ratio grid / as loaded: {ratio:.2f} (bound {args.bound}); states identical every round")
    print(f"image difference over {len(d)} steps: mean {d.mean():.3f}, max {d.max()} grey levels")
    return 0 if ratio <= args.bound else 1


if __name__ == "__main__":
    sys.exit(main())
