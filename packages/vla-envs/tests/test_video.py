"""Episode videos are written as mp4 files readable by imageio, with the info overlay."""

from __future__ import annotations

import numpy as np
import pytest

from vla_envs import EnvConfig, VideoConfig, make_env
from vla_envs.video import overlay_text

pytest.importorskip("metaworld")


def test_overlay_draws_text() -> None:
    frame = np.full((64, 64, 3), 128, np.uint8)
    out = overlay_text(frame, ["step 3"])
    assert out.shape == frame.shape and (out != frame).any() and (frame == 128).all()


def test_episode_video_written_and_readable(tmp_path) -> None:
    import imageio.v2 as imageio

    video = VideoConfig(save_video=True, info_on_video=True, video_base_dir=str(tmp_path), max_envs=1)
    env = make_env(
        EnvConfig(
            env_type="metaworld",
            task="reach-v3",
            num_envs=2,
            envs_per_worker=0,
            image_size=32,
            max_episode_steps=4,
            video=video,
        )
    )
    try:
        env.reset(seed=0)
        # chunks of 3: the episode (4 steps) ends inside the 2nd chunk; the 3rd chunk starts the next one
        for _ in range(3):
            env.chunk_step(np.zeros((2, 3, 4), np.float32))
        files = sorted(p.name for p in tmp_path.iterdir())
        assert files == ["episode_env0_ep0.mp4"]  # only row 0 is recorded
    finally:
        env.close()  # writes the unfinished second episode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["episode_env0_ep0.mp4", "episode_env0_ep1.mp4"]
    frames = imageio.mimread(str(tmp_path / "episode_env0_ep0.mp4"))
    assert len(frames) == 5  # reset frame + every one of the 4 steps (not one frame per chunk)
    assert frames[0].shape == (256, 256, 3)  # upscaled 32 -> 256 for a readable overlay
    assert len(imageio.mimread(str(tmp_path / "episode_env0_ep1.mp4"))) == 4  # reset frame + 3 steps


def test_every_env_that_records_videos_names_them_by_tag() -> None:
    """An env holding an `EpisodeVideoRecorder` must take the run's tag (env rank and iteration), not keep the
    base class's no-op `set_video_tag`: checked over every BatchedEnv of vla_envs, without building simulators."""
    import importlib
    import inspect

    from vla_envs.base import BatchedEnv

    for module in ("vla_envs.vector", "vla_envs.robotwin.env", "vla_envs.maniskill.gpu_env"):
        importlib.import_module(module)
    envs = BatchedEnv.__subclasses__()
    assert {e.__name__ for e in envs} >= {"VectorEnv", "RoboTwinEnv", "ManiSkillGPUEnv"}
    for env in envs:
        if "EpisodeVideoRecorder" in inspect.getsource(inspect.getmodule(env)):
            assert env.set_video_tag is not BatchedEnv.set_video_tag, env.__name__
