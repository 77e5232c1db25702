"""GPU backend: all B envs in one ManiSkill process (`sim_backend="gpu"`), batched on the device.

We drive ManiSkill's batched `BaseEnv` directly rather than through `ManiSkillVectorEnv`, because that wrapper
resets on the *next* step and merges final observations into `info`, while our contract is same-step autoreset
with chunks (see `vla_envs.base`). Every row steps every call (the GPU cannot skip rows): a row whose episode
ended inside a chunk keeps receiving the chunk's remaining actions, but their rewards/flags are dropped and the
row is reset (partial reset) at the end of the call, so the caller sees exactly the same-step semantics.

Outputs: `obs` (images, wrist_images, states) and `rewards`/`terminated`/`truncated` are torch tensors on the
env's device (consumers use `torch.as_tensor`); `final_mask`, `episode_metrics` and `infos` are numpy.

Same-start groups (`reset(reset_state_ids=...)`): each distinct id is reset on one representative row with the
seed `reset_seed(cfg.seed, id)`, and the other rows with that id are set to the representative's simulation state
(actor and articulation poses and velocities) through ManiSkill's `reset_to_env_states`. State that a task keeps
outside the simulation state (e.g. per-env object geometry chosen at reconfiguration, as in PegInsertionSide) is
not copied. Auto-resets and `reset()` without ids use one partial reset with a drawn seed (random starts). With
`auto_reset=False` an ended row is held: it keeps stepping, its outputs are dropped and its obs stays the final
obs until `reset()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vla_envs.base import BatchedEnv, Obs, StepResult
from vla_envs.config import EnvConfig
from vla_envs.episodes import EpisodeTracker
from vla_envs.maniskill import put_on_plate
from vla_envs.maniskill.cpu_sim import instruction_for, reset_seed
from vla_envs.maniskill.observations import batch_obs
from vla_envs.maniskill.options import ManiSkillOptions
from vla_envs.maniskill.runtime import make_task_env
from vla_envs.video import EpisodeVideoRecorder


def _tree_index(tree: Any, idx: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _tree_index(v, idx) for k, v in tree.items()}
    return tree[idx]


def _merge_rows(dst: Obs, src: Obs, mask: Any) -> Obs:
    """Torch version of `merge_obs_rows`: rows where mask [B] (numpy or torch bool) is True come from src."""
    import torch

    out: Obs = {}
    for key, value in dst.items():
        other = src[key]
        if value is None:
            out[key] = None
        elif isinstance(value, list):
            m = mask.tolist()
            out[key] = [o if f else v for v, o, f in zip(value, other, m, strict=True)]
        else:
            m = torch.as_tensor(mask, device=value.device)
            out[key] = other.where(m.reshape((-1,) + (1,) * (value.ndim - 1)), value)
    return out


class ManiSkillGPUEnv(BatchedEnv):
    """B ManiSkill envs simulated (and rendered) together on one GPU.

    Args:
        cfg: The env config.
        opts: Resolved ManiSkill options (sim_backend "gpu").
    """

    def __init__(self, cfg: EnvConfig, opts: ManiSkillOptions) -> None:
        import torch

        self.cfg = cfg
        self.opts = opts
        self.num_envs = cfg.num_envs
        self.action_dim = opts.action_dim
        self.action_low, self.action_high = opts.action_bounds
        self.num_tasks = 1
        self.num_reset_states = cfg.num_trials_per_task
        self.family = opts.put_on_plate  # a PutOnPlateInScene25 task: its instruction, reward, episode ids
        self.instruction = "" if self.family else instruction_for(opts)
        self.env = make_task_env(opts, num_envs=cfg.num_envs)
        self.base = self.env.unwrapped
        self.device = self.base.device
        b = self.num_envs
        if self.family:
            self.total_num_trials = int(self.base.total_num_trials)
            if cfg.num_trials_per_task > self.total_num_trials:
                raise ValueError(
                    f"EnvConfig.num_trials_per_task={cfg.num_trials_per_task} is invalid for {opts.task} with "
                    f"obj_set={opts.obj_set!r}: it has {self.total_num_trials} episode ids; use at most that many"
                )
            self._prev_reward = torch.zeros(b, dtype=torch.float32, device=self.device)
            self._low = torch.as_tensor(self.action_low, device=self.device)
            self._high = torch.as_tensor(self.action_high, device=self.device)
        self._rng = np.random.default_rng(cfg.seed)
        self._steps = torch.zeros(b, dtype=torch.int64, device=self.device)  # steps since reset (time limit)
        self.episodes = EpisodeTracker(b, auto_reset=cfg.auto_reset, merge=_merge_rows)
        # episode videos of the first `video.max_envs` rows, their frames copied to the host as they are observed
        self.video = (
            EpisodeVideoRecorder(cfg.video, b, tag=str(cfg.extra.get("video_tag", "episode")))
            if cfg.video.save_video
            else None
        )
        self._closed = False

    # ------------------------------------------------------------------ helpers
    def _obs(self, raw_obs: Any) -> Obs:
        import torch

        if self.family:
            return {
                "images": put_on_plate.frames(raw_obs, self.opts.image_hw),
                "wrist_images": None,
                "states": self.base.agent.robot.get_qpos().to(torch.float32),
                "task_descriptions": [str(t) for t in self.base.get_language_instruction()],
            }
        return batch_obs(self.base, raw_obs, self.opts, self.instruction)

    def _reset_family_rows(self, rows: np.ndarray, ids: np.ndarray) -> Any:
        """Reset `rows` of a PutOnPlateInScene25 task to the episode ids of their reset_state_ids (one partial
        reset; equal ids give equal episode ids, hence equal starts)."""
        import torch

        n = self.cfg.num_trials_per_task
        episodes = put_on_plate.episode_ids(ids % n, n, self.total_num_trials)
        env_idx = torch.as_tensor(rows, device=self.device)
        raw_obs, _ = self.base.reset(
            options={"env_idx": env_idx, "episode_id": torch.as_tensor(episodes, device=self.device)}
        )
        self._prev_reward[env_idx] = 0.0
        return raw_obs

    def _draw_ids(self, n: int) -> np.ndarray:  # reset_state_ids for same-start groups
        return self._rng.integers(0, self.num_reset_states, size=n)

    def _reset_rows_to_ids(self, rows: np.ndarray, ids: np.ndarray) -> Any:
        """Reset `rows` so that rows with equal ids get identical starts; returns the raw obs of all envs."""
        import torch

        if self.family:
            return self._reset_family_rows(rows, ids)

        raw_obs: Any = None
        reps: dict[int, int] = {}
        for row, rid in zip(rows.tolist(), ids.tolist(), strict=True):
            if rid not in reps:
                reps[rid] = row
                seed = [reset_seed(self.cfg.seed, rid)] * self.num_envs  # same per-env RNG seed for every row
                env_idx = torch.tensor([row], device=self.device)
                raw_obs, _ = self.base.reset(seed=seed, options={"env_idx": env_idx})
        dups = [
            (row, reps[rid]) for row, rid in zip(rows.tolist(), ids.tolist(), strict=True) if reps[rid] != row
        ]
        if dups:
            dst = torch.tensor([d for d, _ in dups], device=self.device)
            src = torch.tensor([s for _, s in dups], device=self.device)
            states = _tree_index(self.base.get_state_dict(), src)
            raw_obs, _ = self.base.reset(
                options={"env_idx": dst, "reset_to_env_states": {"env_states": states}}
            )
        return raw_obs

    def _reset_rows_random(self, rows: np.ndarray) -> Any:
        """One partial reset of `rows` with a seed drawn from the env's generator (distinct random starts)."""
        import torch

        if self.family:  # a drawn trial per row, as the reference draws episode ids
            return self._reset_family_rows(rows, self._draw_ids(len(rows)))

        seed = int(self._rng.integers(0, 2**31 - 1))
        env_idx = torch.as_tensor(rows, device=self.device)
        raw_obs, _ = self.base.reset(seed=seed, options={"env_idx": env_idx})
        return raw_obs

    def _check_actions(self, actions: Any) -> Any:
        import torch

        acts = torch.as_tensor(actions, dtype=torch.float32, device=self.device)
        b, a = self.num_envs, self.action_dim
        if acts.ndim != 3 or acts.shape[0] != b or acts.shape[2] != a or acts.shape[1] < 1:
            raise ValueError(
                f"actions must have shape [num_envs={b}, chunk>=1, action_dim={a}], got {tuple(acts.shape)}"
            )
        if not bool(torch.isfinite(acts).all()):
            raise ValueError("actions contain NaN/inf")
        low = self._low if self.family else -torch.ones(a, device=self.device)
        high = self._high if self.family else torch.ones(a, device=self.device)
        if self.cfg.action_out_of_range == "error":
            excess = float(torch.maximum(low - acts, acts - high).max())
            if excess > self.cfg.action_tolerance:
                raise ValueError(
                    f"an action is outside the action range [{self.action_low.tolist()}, "
                    f"{self.action_high.tolist()}] by {excess:.4f} > action_tolerance="
                    f"{self.cfg.action_tolerance} (set action_out_of_range='clip' to clip instead)"
                )
        acts = torch.maximum(torch.minimum(acts, high), low)
        if self.family and self.opts.gripper_action == "threshold":
            acts[..., 6] = torch.where(acts[..., 6] > 0.5, 1.0, -1.0)
        return acts

    # ------------------------------------------------------------------ API
    def reset(
        self, seed: int | None = None, reset_state_ids: Sequence[int] | np.ndarray | None = None
    ) -> Obs:
        """Reset every env (see BatchedEnv.reset); ids lie in [0, num_trials_per_task)."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        if reset_state_ids is None and not self.cfg.use_fixed_reset_state_ids:
            ids = None
        elif reset_state_ids is None:
            gs = self.cfg.group_size
            ids = np.repeat(self._draw_ids(self.num_envs // gs), gs)
        else:
            ids = np.asarray(reset_state_ids)
            if ids.shape != (self.num_envs,) or not np.issubdtype(ids.dtype, np.integer):
                raise ValueError(
                    f"reset_state_ids must be integers of shape [num_envs={self.num_envs}], got {ids.shape} {ids.dtype}"
                )
            if ids.min() < 0 or ids.max() >= self.num_reset_states:
                raise ValueError(
                    f"reset_state_ids must lie in [0, num_reset_states={self.num_reset_states}), got min "
                    f"{ids.min()} max {ids.max()}"
                )
        rows = np.arange(self.num_envs)
        raw_obs = (
            self._reset_rows_random(rows)
            if ids is None
            else self._reset_rows_to_ids(rows, ids.astype(np.int64))
        )
        self._steps.zero_()
        obs = self._obs(raw_obs)
        self.episodes.start(obs)
        if self.video is not None:
            self.video.start(self._host_images(obs))
        return obs

    def step(self, actions: Any) -> StepResult:
        """One action per env: actions [B, A] (numpy or a torch tensor on any device)."""
        import torch

        acts = torch.as_tensor(actions, dtype=torch.float32, device=self.device)
        if acts.ndim != 2:
            raise ValueError(
                f"step(actions) expects shape [num_envs={self.num_envs}, action_dim={self.action_dim}], "
                f"got {tuple(acts.shape)}; use chunk_step for [B, C, A]"
            )
        return self.chunk_step(acts[:, None, :])

    def chunk_step(self, actions: Any) -> StepResult:
        """Step through actions [B, C, A] (numpy or torch; see BatchedEnv.chunk_step)."""
        import torch

        obs: Obs = self.episodes.last_obs()
        acts = self._check_actions(actions)
        b, c = self.num_envs, acts.shape[1]
        dev = self.device
        rewards = torch.zeros((b, c), dtype=torch.float32, device=dev)
        terminated = torch.zeros((b, c), dtype=torch.bool, device=dev)
        truncated = torch.zeros((b, c), dtype=torch.bool, device=dev)
        success = torch.zeros((b, c), dtype=torch.bool, device=dev)
        ended = torch.zeros(b, dtype=torch.bool, device=dev)
        steps_taken = torch.zeros(b, dtype=torch.int64, device=dev)
        held = torch.as_tensor(self.episodes.held, device=dev)
        final_obs: Obs | None = None
        for t in range(c):
            raw_obs, reward, _, _, info = self.base.step(acts[:, t])
            if self.family:
                step = put_on_plate.step_reward(info, self.opts.reward_mode).to(dev)
                reward = step - self._prev_reward if self.opts.use_rel_reward else step
                self._prev_reward = step
            live = ~held & ~ended
            succ = info["success"].to(dev) if "success" in info else torch.zeros_like(live)
            fail = info["fail"].to(dev) if "fail" in info else torch.zeros_like(live)
            self._steps += live.long()
            steps_taken += live.long()
            rewards[:, t] = torch.where(live, reward.to(dev, torch.float32), 0.0)
            success[:, t] = succ & live
            term = (succ | fail) & live if not self.cfg.ignore_terminations else torch.zeros_like(live)
            trunc = live & ~term & (self._steps >= self.cfg.max_episode_steps)
            terminated[:, t] = term
            truncated[:, t] = trunc
            obs = self._obs(raw_obs)
            newly = term | trunc
            if bool(newly.any()):
                final_obs = obs if final_obs is None else _merge_rows(final_obs, obs, newly)
            if self.video is not None:
                self._record_step(obs, live, rewards[:, t], success[:, : t + 1])
            ended |= newly
        # the chunk's per-row counts in one device -> host copy
        chunk_return, taken, succeeded, done = (
            torch.stack([rewards.sum(dim=1), steps_taken.float(), success.any(dim=1).float(), ended.float()])
            .cpu()
            .numpy()
        )
        ended_np = done > 0
        self.episodes.add(chunk_return[:, None], taken.astype(np.int64), succeeded[:, None] > 0)
        metrics = self.episodes.end(ended_np)
        self._steps[ended] = 0
        obs, final = self.episodes.next_obs(
            obs,
            obs if final_obs is None else final_obs,
            ended_np,
            lambda rows: self._obs(self._reset_rows_random(rows)),
        )
        if self.video is not None and ended_np.any():
            images = self._host_images(obs) if self.cfg.auto_reset else None
            for r in self.video.rows:
                if ended_np[r]:
                    self.video.finish(r, None if images is None else images[r])
        return StepResult(
            obs=obs,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            final_obs=final,
            final_mask=ended_np,
            episode_metrics=metrics,
            infos={"success": success.cpu().numpy(), "worker_restarts": 0},
        )

    def set_video_tag(self, tag: str) -> None:
        """Name prefix of the video files written from now on (`{tag}_env{row}_ep{n}.mp4`); episodes in progress
        are written under the new tag. No-op without `save_video`."""
        if self.video is not None:
            self.video.tag = str(tag)

    def close(self) -> None:
        """Write pending videos and close the ManiSkill env (idempotent)."""
        if not self._closed:
            self._closed = True
            if self.video is not None:
                self.video.close()
            self.env.close()

    # ------------------------------------------------------------------ videos
    def _host_images(self, obs: Obs) -> np.ndarray:
        """The recorded rows' frames as a host uint8 array [rows, H, W, 3] (row r at index r)."""
        assert self.video is not None
        n = len(self.video.rows)
        return np.asarray(obs["images"][:n].detach().cpu().numpy(), dtype=np.uint8)

    def _record_step(self, obs: Obs, live: Any, reward: Any, success: Any) -> None:
        """One frame per recorded row that is still in its episode, with its step, reward and success so far."""
        assert self.video is not None
        n = len(self.video.rows)
        images = self._host_images(obs)
        live_h, reward_h = live[:n].cpu().numpy(), reward[:n].cpu().numpy()
        success_h = success[:n].any(dim=1).cpu().numpy()
        succeeded = self.episodes.succeeded()
        steps = self._steps[:n].cpu().numpy()  # steps into each row's episode
        for r in self.video.rows:
            if live_h[r]:
                self.video.add(
                    r, images[r], step=int(steps[r]), reward=float(reward_h[r]),
                    success=bool(succeeded[r] or success_h[r]),
                )  # fmt: skip
