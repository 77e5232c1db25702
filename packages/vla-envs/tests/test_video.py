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


def _episode(recorder, frames: int = 6) -> None:
    image = np.zeros((1, 16, 16, 3), np.uint8)
    recorder.start(image)
    for step in range(1, frames):
        recorder.add(0, image[0] + step, step=step, reward=0.0, success=False)


def test_a_video_the_file_system_refuses_is_one_error_naming_it(tmp_path) -> None:
    """A video folder that cannot be made (here a file stands where it should be) raises `VideoWriteError`, an
    OSError naming the video; the recorder then drops its other episodes instead of failing again on close."""
    from vla_envs.video import EpisodeVideoRecorder, VideoWriteError

    (tmp_path / "videos").write_text("a file where the folder should be")
    recorder = EpisodeVideoRecorder(VideoConfig(save_video=True, video_base_dir=str(tmp_path / "videos")), 1)
    _episode(recorder)
    with pytest.raises(VideoWriteError) as info:
        recorder.finish(0, None)
    assert info.value.filename == str(tmp_path / "videos" / "episode_env0_ep0.mp4")
    assert info.value.strerror and "\n" not in str(info.value)
    _episode(recorder)
    recorder.close()  # no second error


def test_a_cut_video_is_not_kept(tmp_path) -> None:
    """ffmpeg can end without an error while the disk took only part of its output (here a file size limit): the
    cut file is removed and the error names the video."""
    import resource
    import subprocess
    import sys

    script = (
        "import numpy as np, sys\n"
        "from vla_envs import VideoConfig\n"
        "from vla_envs.video import EpisodeVideoRecorder, VideoWriteError\n"
        f"r = EpisodeVideoRecorder(VideoConfig(save_video=True, video_base_dir={str(tmp_path)!r}), 1)\n"
        "rng = np.random.default_rng(0)\n"
        "r.start(rng.integers(0, 255, (1, 64, 64, 3), dtype=np.uint8))\n"
        "for s in range(1, 40):\n"
        "    r.add(0, rng.integers(0, 255, (64, 64, 3), dtype=np.uint8), step=s, reward=0.0, success=False)\n"
        "try:\n"
        "    r.finish(0, None)\n"
        "except VideoWriteError as exc:\n"
        "    print(exc.filename)\n"
        "    sys.exit(3)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384)),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert proc.stdout.strip() == str(tmp_path / "episode_env0_ep0.mp4")
    assert list(tmp_path.iterdir()) == []
