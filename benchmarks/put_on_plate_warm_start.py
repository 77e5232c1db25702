"""How well can the tiny OpenVLA-OFT imitate the PutOnPlateInScene25 scripted expert? Probes of a warm start.

    python benchmarks/put_on_plate_warm_start.py fit --like S/policy --demos S/demos --out D [--vision-dim 128 ...]
    python benchmarks/put_on_plate_warm_start.py lag [--perturb 0.01]
    python benchmarks/put_on_plate_warm_start.py dagger --policy S/policy --demos S/demos --out D [--rounds 5]
    python benchmarks/put_on_plate_warm_start.py keypoints --demos S/demos [--steps 4000]

S is a `vla-sft maniskill_put_on_plate_ppo_tiny_cpu` folder (its demos; `--like`: its policy's settings: action
bins, norm stats, proprio). The stand-in or real assets come from MS_ASSET_DIR / MANISKILL_ASSET_DIR.

`fit` trains a policy from scratch by behaviour cloning on the demos' successful episodes but the last
`--held-out` ones, with the backbone sizes given, and every `--every` steps prints one JSON row: token loss,
teacher-forced greedy error of the end-effector move (mean |error| in metres over x, y, z and the fraction of frames
off by more than 1 cm on some axis, where a grasp needs about 1 cm) on training frames and on the held-out
episodes' frames, and the closed-loop sampled success on `--episodes` training-distribution starts (trials from
300000: apart from training, evaluation and demo starts). A warm start that cannot fit its own demos' moves says the
model, not PPO, is the limit.

`lag` runs the expert (with `--perturb` noise on the executed moves, as perturbed demos do) and prints how far the
arm controller's target leads the measured end effector when the expert decides. The expert's labels are moves of
that target, which no observation shows.

`keypoints` asks whether a vision stem that localises does better than the ViT: a small convolutional network with
a spatial-softmax read-out (each of `--keypoints` feature maps gives the expected image position of its peak) and
the proprio state into an MLP, regressing the scaled move (mean squared error) and the gripper (logistic), trained
on the same split and reported with the same teacher-forced errors and closed-loop success as `fit`.

`dagger` drives the env with the policy (sampled actions), labels every state it visits with the expert's action
(the expert reads the live privileged state), adds those frames to the demos and fine-tunes for `--steps`, for
`--rounds` rounds (DAgger). Each round prints the policy's success on its `--episodes` fresh starts and the mean
largest per-axis move error against the expert along the policy's own path.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

TASK = "PutOnPlateInScene25Main-v3"
PROBE_TRIALS = 300_000  # starts apart from training (0-999), evaluation (50000+) and demos (100000+)
DAGGER_TRIALS = 200_000


def make_sim(expert_settings=None):
    """A PutOnPlateInScene25Main-v3 env as `maniskill_put_on_plate_ppo_tiny_cpu` builds it, and its expert."""
    os.environ.setdefault("LP_NUM_THREADS", "1")
    from vla_envs.maniskill import put_on_plate

    put_on_plate.prepare_process(*put_on_plate.asset_roots(None))
    from vla_envs.config import EnvConfig
    from vla_envs.maniskill.cpu_sim import PutOnPlateSim
    from vla_envs.maniskill.options import resolve_options
    from vla_envs.maniskill.put_on_plate_expert import PutOnPlateExpert

    cfg = EnvConfig(
        env_type="maniskill",
        task=TASK,
        image_size=(64, 64),
        max_episode_steps=30,
        reward_mode="dense",
        num_trials_per_task=1,
        seed=0,
        extra={"obj_set": "train", "render_scale": 0.25},
    )
    opts = resolve_options(cfg)
    threads = torch.get_num_threads()
    sim = PutOnPlateSim(cfg, opts)  # sets torch to one thread, as a simulator worker process runs
    torch.set_num_threads(threads)  # this process also trains: --threads stays
    return cfg, sim, PutOnPlateExpert(expert_settings, gripper_action=opts.gripper_action)


def policy_obs(obs: dict, use_proprio: bool) -> dict:
    states = torch.as_tensor(np.asarray(obs["states"], dtype=np.float32))[None] if use_proprio else None
    return {
        "images": torch.as_tensor(np.asarray(obs["images"]))[None],
        "wrist_images": None,
        "states": states,
        "task_descriptions": [obs["task_descriptions"]],
    }


def run_episodes(policy, sim, expert, cfg, trials, *, record: bool) -> dict:
    """The policy (sampled) from each trial's start; the expert labels every visited state."""
    from vla_envs.maniskill import put_on_plate

    frames: dict[str, list] = {"images": [], "states": [], "actions": [], "texts": []}
    successes, errors = [], []
    for trial in trials:
        episode = int(put_on_plate.episode_ids(np.array([trial]), 1, sim.total_num_trials)[0])
        obs = sim.reset_episode(episode, trial)
        expert.reset()
        success = False
        for _ in range(cfg.max_episode_steps):
            label = expert.act(sim.base)
            with torch.no_grad():
                action = (
                    policy.predict(policy_obs(obs, policy.config.use_proprio), mode="sample")
                    .actions[0, 0]
                    .numpy()
                )
            errors.append(float(np.abs(action[:3] - label[:3]).max()))
            if record:
                frames["images"].append(np.asarray(obs["images"]))
                frames["states"].append(np.asarray(obs["states"], dtype=np.float32))
                frames["actions"].append(np.asarray(label, dtype=np.float32))
                frames["texts"].append(obs["task_descriptions"])
            obs, _, success, _ = sim.step(action)
            if success:
                break
        successes.append(success)
    return {"success": float(np.mean(successes)), "move_error": float(np.mean(errors)), "frames": frames}


def make_optimizer(policy, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=lr)


def bc_steps(
    policy,
    data: dict,
    rows: np.ndarray,
    steps: int,
    optimizer,
    g: torch.Generator,
    batch: int = 64,
    shift: int = 4,
) -> list[float]:
    from train_embodied.sft import random_shift

    rows_t = torch.as_tensor(rows)
    losses = []
    for _ in range(steps):
        idx = rows_t[torch.randint(0, len(rows_t), (batch,), generator=g)]
        obs = {
            "images": random_shift(data["images"][idx], shift, g),
            "wrist_images": None,
            "states": data["states"][idx] if policy.config.use_proprio else None,
            "task_descriptions": [data["texts"][i] for i in idx.tolist()],
        }
        loss, _ = policy.sft_loss(obs, data["actions"][idx][:, None])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def teacher_forced(policy, data: dict, rows: np.ndarray, limit: int = 512) -> dict:
    idx = torch.as_tensor(rows[:limit])
    errs = []
    with torch.no_grad():
        for s in range(0, len(idx), 128):
            i = idx[s : s + 128]
            obs = {
                "images": data["images"][i],
                "wrist_images": None,
                "states": data["states"][i] if policy.config.use_proprio else None,
                "task_descriptions": [data["texts"][k] for k in i.tolist()],
            }
            errs.append((policy.predict(obs, mode="greedy").actions[:, 0, :3] - data["actions"][i, :3]).abs())
    e = torch.cat(errs)
    return {
        "mean_m": round(float(e.mean()), 4),
        "over_1cm": round(float((e.max(1).values > 0.01).float().mean()), 3),
    }


def load_data(path: str) -> dict:
    from vla_envs import load_demos

    d = load_demos(path, only_success=True)
    return {
        "images": torch.as_tensor(d["images"]),
        "states": torch.as_tensor(d["states"].astype(np.float32)),
        "actions": torch.as_tensor(d["actions"].astype(np.float32)),
        "texts": list(d["task_descriptions"]),
        "episode_index": d["episode_index"],
    }


def fit(args: argparse.Namespace) -> None:
    from vla_models import build_policy, load_policy
    from vla_models.prismatic.configuration_prismatic import PrismaticConfig

    torch.manual_seed(args.seed)
    like = load_policy(args.like).config
    backbone = PrismaticConfig.tiny(
        image_size=like.backbone.image_size,
        patch_size=None if args.vision_stem == "keypoints" else args.patch_size,
        vision_dim=args.vision_dim,
        vision_stem=args.vision_stem,
        hidden_size=args.hidden_size,
        num_layers=args.num_layers,
    )
    config = dataclasses.replace(
        like, backbone=backbone, model_path=None, tokenizer="tiny", use_proprio=not args.no_proprio
    )
    policy = build_policy(config)
    policy.eval()
    data = load_data(args.demos)
    episodes = np.unique(data["episode_index"])
    held = np.isin(data["episode_index"], episodes[-args.held_out :])
    train_rows, held_rows = np.flatnonzero(~held), np.flatnonzero(held)
    cfg, sim, expert = make_sim()
    print(
        json.dumps(
            {"parameters": sum(p.numel() for p in policy.parameters()), "train_frames": len(train_rows)}
        )
    )
    optimizer = make_optimizer(policy, args.lr)
    g = torch.Generator().manual_seed(args.seed)
    t0 = time.time()
    done = 0
    losses: list[float] = []
    while done < args.steps:
        n = min(args.every, args.steps - done)
        losses += bc_steps(policy, data, train_rows, n, optimizer, g, shift=args.shift)
        done += n
        closed = run_episodes(
            policy, sim, expert, cfg, range(PROBE_TRIALS, PROBE_TRIALS + args.episodes), record=False
        )
        row = {
            "step": done,
            "loss": round(float(np.mean(losses[-50:])), 3),
            "seconds": round(time.time() - t0),
            "teacher_forced_train": teacher_forced(policy, data, train_rows),
            "teacher_forced_held_out": teacher_forced(policy, data, held_rows),
            "closed_loop_success": closed["success"],
            "closed_loop_move_error_m": round(closed["move_error"], 4),
        }
        print(json.dumps(row), flush=True)
        policy.save_pretrained(str(Path(args.out) / "policy"))
    sim.close()


class KeypointNet(torch.nn.Module):
    """Convolutions -> spatial softmax (expected x, y of each of `k` feature maps) + normalised proprio -> MLP ->
    7 outputs (moves and turns scaled by the norm-stats range, a gripper logit)."""

    def __init__(
        self, k: int, state_mean: torch.Tensor, state_std: torch.Tensor, image_size: int = 64
    ) -> None:
        super().__init__()
        nn = torch.nn
        self.conv = nn.Sequential(
            nn.Conv2d(3, 32, 5, padding=2), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, k, 1),
        )  # fmt: skip
        line = torch.linspace(-1, 1, image_size)
        ys, xs = torch.meshgrid(line, line, indexing="ij")
        self.register_buffer("grid", torch.stack([xs.flatten(), ys.flatten()], 1))
        self.register_buffer("state_mean", state_mean)
        self.register_buffer("state_std", state_std)
        self.head = nn.Sequential(
            nn.Linear(2 * k + len(state_mean), 256),
            nn.ReLU(),
            nn.Linear(256, 256),
            nn.ReLU(),
            nn.Linear(256, 7),
        )

    def forward(self, images: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        x = (images.permute(0, 3, 1, 2).float() / 255.0 - 0.5) / 0.25
        heat = self.conv(x).flatten(2)
        points = (torch.softmax(heat, -1) @ self.grid).flatten(1)
        return self.head(torch.cat([points, (states - self.state_mean) / self.state_std], 1))


KEYPOINT_SCALE = torch.tensor([0.04, 0.04, 0.04, 0.5, 0.5, 0.5, 1.0])


def keypoint_actions(net: KeypointNet, images: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out = net(images, states) * KEYPOINT_SCALE
    out[:, 6] = (out[:, 6] > 0).float()  # the logit's sign: 1 opens, 0 closes
    return out


def keypoints(args: argparse.Namespace) -> None:
    from vla_envs.maniskill import put_on_plate

    torch.manual_seed(args.seed)
    data = load_data(args.demos)
    episodes = np.unique(data["episode_index"])
    held = np.isin(data["episode_index"], episodes[-args.held_out :])
    train_rows, held_rows = np.flatnonzero(~held), np.flatnonzero(held)
    states = data["states"][train_rows]
    net = KeypointNet(args.keypoints, states.mean(0), states.std(0) + 1e-3)
    cfg, sim, _ = make_sim()

    def teacher_forced_error(rows: np.ndarray) -> dict:
        i = torch.as_tensor(rows[:1024])
        e = (keypoint_actions(net, data["images"][i], data["states"][i]) - data["actions"][i]).abs()
        return {
            "mean_m": round(float(e[:, :3].mean()), 4),
            "over_1cm": round(float((e[:, :3].max(1).values > 0.01).float().mean()), 3),
        }

    def closed_loop() -> float:
        successes = []
        for trial in range(PROBE_TRIALS, PROBE_TRIALS + args.episodes):
            episode = int(put_on_plate.episode_ids(np.array([trial]), 1, sim.total_num_trials)[0])
            obs = sim.reset_episode(episode, trial)
            success = False
            for _ in range(cfg.max_episode_steps):
                image = torch.as_tensor(np.asarray(obs["images"]))[None]
                state = torch.as_tensor(np.asarray(obs["states"], dtype=np.float32))[None]
                obs, _, success, _ = sim.step(keypoint_actions(net, image, state)[0].numpy())
                if success:
                    break
            successes.append(bool(success))
        return float(np.mean(successes))

    print(
        json.dumps({"parameters": sum(p.numel() for p in net.parameters()), "train_frames": len(train_rows)})
    )
    optimizer = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=1e-4)
    g = torch.Generator().manual_seed(args.seed)
    rows_t = torch.as_tensor(train_rows)
    t0, losses = time.time(), []
    for step in range(1, args.steps + 1):
        i = rows_t[torch.randint(0, len(rows_t), (64,), generator=g)]
        out, target = net(data["images"][i], data["states"][i]), data["actions"][i] / KEYPOINT_SCALE
        loss = torch.nn.functional.mse_loss(out[:, :6], target[:, :6])
        loss = loss + torch.nn.functional.binary_cross_entropy_with_logits(out[:, 6], target[:, 6])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        if step % args.every == 0 or step == args.steps:
            row = {
                "step": step,
                "loss": round(float(np.mean(losses[-100:])), 4),
                "seconds": round(time.time() - t0),
                "teacher_forced_train": teacher_forced_error(train_rows),
                "teacher_forced_held_out": teacher_forced_error(held_rows),
                "closed_loop_success": closed_loop(),
            }
            print(json.dumps(row), flush=True)
    sim.close()


def lag(args: argparse.Namespace) -> None:
    """How far the controller's target leads the measured end effector when the expert decides (its labels are
    moves of the target, which no observation shows), over `--episodes` expert episodes with `--perturb` noise."""
    from vla_envs.maniskill import put_on_plate
    from vla_envs.maniskill.put_on_plate_expert import ExpertSettings

    cfg, sim, expert = make_sim(ExpertSettings(max_move=args.max_move))
    rng = np.random.default_rng(args.seed)
    leads, moves = [], []
    for trial in range(PROBE_TRIALS, PROBE_TRIALS + args.episodes):
        episode = int(put_on_plate.episode_ids(np.array([trial]), 1, sim.total_num_trials)[0])
        sim.reset_episode(episode, trial)
        expert.reset()
        for _ in range(cfg.max_episode_steps):
            ctrl = sim.base.agent.controller.controllers["arm"]
            lead = ctrl._target_pose.p[0].cpu().numpy() - ctrl.ee_pose_at_base.p[0].cpu().numpy()
            action = expert.act(sim.base)
            leads.append(float(np.abs(lead).max()))
            moves.append(float(np.abs(action[:3]).max()))
            executed = action.copy()
            executed[:3] += rng.normal(0.0, args.perturb, 3).astype(np.float32)
            if sim.step(executed)[2]:
                break
    sim.close()
    lead_m = np.array(leads)
    print(json.dumps({
        "decisions": len(leads),
        "target_lead_m": {"mean": round(float(lead_m.mean()), 4), "median": round(float(np.median(lead_m)), 4),
                          "p90": round(float(np.percentile(lead_m, 90)), 4)},
        "expert_move_m_mean": round(float(np.mean(moves)), 4),
    }))  # fmt: skip


def dagger(args: argparse.Namespace) -> None:
    from vla_models import load_policy

    policy = load_policy(args.policy)
    policy.eval()
    data = load_data(args.demos)
    cfg, sim, expert = make_sim()
    for r in range(args.rounds + 1):
        t0 = time.time()
        trials = range(DAGGER_TRIALS + r * args.episodes, DAGGER_TRIALS + (r + 1) * args.episodes)
        got = run_episodes(policy, sim, expert, cfg, trials, record=True)
        row = {"round": r, "success": got["success"], "move_error_m": round(got["move_error"], 4)}
        if r < args.rounds:
            f = got["frames"]
            data["images"] = torch.cat([data["images"], torch.as_tensor(np.stack(f["images"]))])
            data["states"] = torch.cat([data["states"], torch.as_tensor(np.stack(f["states"]))])
            data["actions"] = torch.cat([data["actions"], torch.as_tensor(np.stack(f["actions"]))])
            data["texts"] += f["texts"]
            rows = np.arange(len(data["actions"]))
            g = torch.Generator().manual_seed(args.seed + r)
            losses = bc_steps(policy, data, rows, args.steps, make_optimizer(policy, args.lr), g)
            row.update(frames=len(data["actions"]), loss=round(float(np.mean(losses[-50:])), 3))
            policy.save_pretrained(str(Path(args.out) / f"policy_round{r + 1}"))
        row["seconds"] = round(time.time() - t0)
        print(json.dumps(row), flush=True)
    sim.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fit", help="behaviour cloning from scratch with a chosen backbone size")
    f.add_argument(
        "--like", required=True, help="a vla-sft policy folder whose settings the new policy takes"
    )
    f.add_argument("--vision-dim", type=int, default=64)
    f.add_argument("--num-layers", type=int, default=2, help="language-model layers")
    f.add_argument("--hidden-size", type=int, default=128)
    f.add_argument("--patch-size", type=int, default=16)
    f.add_argument(
        "--vision-stem", choices=("vit", "keypoints"), default="vit", help="the tiny backbone's vision_stem"
    )
    f.add_argument("--no-proprio", action="store_true")
    f.add_argument(
        "--shift", type=int, default=4, help="random-shift augmentation (pixels), as sft.augment_shift"
    )
    f.add_argument("--steps", type=int, default=10000)
    f.add_argument("--every", type=int, default=2000)
    f.add_argument("--held-out", type=int, default=30, help="demo episodes kept out of training")
    f.add_argument("--lr", type=float, default=3e-4)
    lg = sub.add_parser(
        "lag", help="the controller target's lead over the measured end effector at decisions"
    )
    lg.add_argument("--max-move", type=float, default=0.04, help="the expert's largest move per decision (m)")
    lg.add_argument("--perturb", type=float, default=0.0, help="std (m) of noise on the executed moves")
    d = sub.add_parser("dagger", help="expert relabelling of the policy's own states")
    d.add_argument("--policy", required=True)
    d.add_argument("--rounds", type=int, default=5)
    d.add_argument("--steps", type=int, default=1000, help="behaviour-cloning steps per round")
    d.add_argument("--lr", type=float, default=1e-4)
    k = sub.add_parser("keypoints", help="behaviour cloning with a convolutional spatial-softmax stem")
    k.add_argument("--keypoints", type=int, default=16)
    k.add_argument("--steps", type=int, default=4000)
    k.add_argument("--every", type=int, default=1000)
    k.add_argument("--held-out", type=int, default=30, help="demo episodes kept out of training")
    k.add_argument("--lr", type=float, default=1e-3)
    k.add_argument("--demos", required=True)
    for p in (f, d):
        p.add_argument("--demos", required=True)
        p.add_argument("--out", required=True)
    for p in (f, d, lg, k):
        p.add_argument("--episodes", type=int, default=20)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if getattr(args, "out", None):
        Path(args.out).mkdir(parents=True, exist_ok=True)
    {"fit": fit, "lag": lag, "dagger": dagger, "keypoints": keypoints}[args.command](args)


if __name__ == "__main__":
    main()
