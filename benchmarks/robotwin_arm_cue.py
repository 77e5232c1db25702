"""Does a RoboTwin press_stapler warm start choose its arm from the picture or from the instruction?

    python benchmarks/robotwin_arm_cue.py --policy <sft folder>/policy
    python benchmarks/robotwin_arm_cue.py --policy <folder> --demos <demo folder> --bound 0.9

RoboTwin's press_stapler expert presses with the left arm when the stapler lies left of the midline and with the
right arm otherwise; the other arm holds its start pose. The arm is thus visible in the first picture, and some
instructions name it ("... with the left arm"). Each successful demo's first frame is shown to the policy three ways
and its greedy first action chunk is read (the arm whose joints leave the start pose most, none below 0.1 rad):

- as recorded (picture and instruction of the same episode);
- with the instruction of an episode whose expert used the other arm: a policy that reads the picture keeps the
  picture's arm, one that memorised instructions follows the instruction;
- with a neutral instruction (`--neutral`) that names no arm and no stapler.

It prints the three counts and the fraction of conflicting cases in which the arm follows the picture against the
bound (`--bound`). Only the policy and the demos are needed (no simulator): `--demos` defaults to the `demos` folder
beside the policy folder, as `vla-sft` writes them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

ARM_JOINTS = {
    "left": slice(0, 6),
    "right": slice(7, 13),
}  # RoboTwin's 14-D layout: 6 joints + gripper per arm
MOVE_RAD = 0.1


def arm_of(actions: np.ndarray, start: np.ndarray) -> str:
    """The arm whose joints leave the start pose most over `actions` [T, 14] ("none" if neither by MOVE_RAD)."""
    moves = {arm: float(np.abs(actions[:, s] - start[s]).max()) for arm, s in ARM_JOINTS.items()}
    arm = max(moves, key=moves.get)
    return arm if moves[arm] >= MOVE_RAD else "none"


def first_frames(demos: dict) -> list[dict]:
    """Per successful episode: its first image, start state, instruction and the expert's arm."""
    out = []
    index = demos["episode_index"]
    for e in np.unique(index):
        rows = np.flatnonzero(index == e)
        start = demos["states"][rows[0]]
        out.append(
            {
                "image": demos["images"][rows[0]],
                "state": start,
                "instruction": demos["task_descriptions"][rows[0]],
                "arm": arm_of(demos["actions"][rows], start),
            }
        )
    return [f for f in out if f["arm"] != "none"]


def policy_arms(policy, frames: list[dict], instructions: list[str]) -> list[str]:
    obs = {
        "images": np.stack([f["image"] for f in frames]),
        "states": np.stack([f["state"] for f in frames]),
        "task_descriptions": instructions,
    }
    with torch.no_grad():
        actions = policy.predict(obs, mode="greedy").actions.float().numpy()
    return [arm_of(a, f["state"]) for a, f in zip(actions, frames, strict=True)]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policy", required=True, help="a policy folder written by vla-sft or vla-train")
    parser.add_argument(
        "--demos", default=None, help="the warm start's demo folder (default: <policy>/../demos)"
    )
    parser.add_argument("--neutral", default="Press the stapler.", help="an instruction that names no arm")
    parser.add_argument(
        "--bound", type=float, default=0.9, help="fraction of conflicts the picture should win"
    )
    args = parser.parse_args()

    from vla_envs import load_demos
    from vla_models import load_policy

    torch.set_num_threads(2)
    demo_dir = Path(args.demos) if args.demos else Path(args.policy).resolve().parent / "demos"
    frames = first_frames(load_demos(demo_dir, only_success=True))
    if not any(f["arm"] == "left" for f in frames) or not any(f["arm"] == "right" for f in frames):
        raise SystemExit(f"{demo_dir}: the demos need episodes of both arms")
    policy = load_policy(args.policy)
    policy.eval()

    own = policy_arms(policy, frames, [f["instruction"] for f in frames])
    # each frame with the instruction of the next episode (cyclically) whose expert used the other arm
    other = []
    for i, f in enumerate(frames):
        j = next(
            k % len(frames)
            for k in range(i + 1, i + 1 + len(frames))
            if frames[k % len(frames)]["arm"] != f["arm"]
        )
        other.append(frames[j]["instruction"])
    swapped = policy_arms(policy, frames, other)
    neutral = policy_arms(policy, frames, [args.neutral] * len(frames))

    n = len(frames)
    truth = [f["arm"] for f in frames]
    correct = lambda arms: sum(a == t for a, t in zip(arms, truth, strict=True))  # noqa: E731
    follows_picture = correct(swapped)
    follows_text = sum(a not in (t, "none") for a, t in zip(swapped, truth, strict=True))
    print(
        f"{args.policy}: {n} first frames of successful demos ({truth.count('left')} left arm, {truth.count('right')} right)"
    )
    print(f"  own instruction:      the expert's arm {correct(own)}/{n}, no arm moves {own.count('none')}")
    print(
        f"  other arm's text:     follows picture {follows_picture}/{n}, follows instruction {follows_text}/{n}, no arm moves {swapped.count('none')}"
    )
    print(
        f"  neutral {args.neutral!r}: the expert's arm {correct(neutral)}/{n}, no arm moves {neutral.count('none')}"
    )
    ratio = follows_picture / n
    verdict = "meets" if ratio >= args.bound else "misses"
    print(f"picture wins {ratio:.2f} of conflicts; bound {args.bound:.2f}: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
