"""`vla-envs` command line: `vla-envs demos metaworld|maniskill ...`, `vla-envs tasks ENV_TYPE`."""

from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vla-envs", description="vla-envs tools")
    sub = parser.add_subparsers(dest="command", required=True)

    tasks = sub.add_parser("tasks", help="list the tasks of an env type")
    tasks.add_argument("env_type")

    demos = sub.add_parser("demos", help="generate scripted-expert demonstrations")
    demos.add_argument("env_type", choices=["metaworld", "maniskill"])
    demos.add_argument(
        "--tasks", required=True, help="comma-separated task names, or MT10/MT50/ML45-train/..."
    )
    demos.add_argument("--episodes", type=int, required=True, help="episodes per task")
    demos.add_argument("--out", required=True, help="output directory")
    demos.add_argument("--image-size", type=int, default=64)
    demos.add_argument("--camera", default=None, help="MetaWorld: default corner2")
    demos.add_argument("--wrist-camera", default=None)
    demos.add_argument("--action-repeat", type=int, default=4)
    demos.add_argument(
        "--max-episode-steps", type=int, default=None, help="MetaWorld default 50; ManiSkill default 400"
    )
    demos.add_argument("--reward-mode", choices=["sparse", "dense", "normalized_dense"], default="sparse")
    demos.add_argument("--hide-far-meshes", action="store_true")
    demos.add_argument("--workers", type=int, default=2, help="worker processes (0 = in-process)")
    demos.add_argument("--seed", type=int, default=0)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `vla-envs` console script."""
    args = _parser().parse_args(argv)
    if args.command == "tasks":
        from vla_envs.registry import list_tasks

        print("\n".join(list_tasks(args.env_type)))
        return 0
    if args.env_type == "maniskill":
        from vla_envs.maniskill import generate_maniskill_demos

        ms_kwargs = {} if args.max_episode_steps is None else {"max_episode_steps": args.max_episode_steps}
        meta = generate_maniskill_demos(
            args.out,
            tasks=args.tasks.split(","),
            episodes_per_task=args.episodes,
            image_size=args.image_size,
            wrist_camera=args.wrist_camera,
            reward_mode=args.reward_mode,
            num_workers=args.workers,
            seed=args.seed,
            **ms_kwargs,
        )
        _print_summary(meta, args.out)
        return 0
    from vla_envs.demos import generate_metaworld_demos
    from vla_envs.metaworld.tasks import TASK_SETS

    names = args.tasks.split(",")
    tasks = TASK_SETS[names[0]][0] if len(names) == 1 and names[0] in TASK_SETS else names
    meta = generate_metaworld_demos(
        args.out,
        tasks=tasks,
        episodes_per_task=args.episodes,
        image_size=args.image_size,
        camera=args.camera,
        wrist_camera=args.wrist_camera,
        action_repeat=args.action_repeat,
        max_episode_steps=50 if args.max_episode_steps is None else args.max_episode_steps,
        reward_mode=args.reward_mode,
        hide_far_meshes=args.hide_far_meshes,
        num_workers=args.workers,
        seed=args.seed,
    )
    _print_summary(meta, args.out)
    return 0


def _print_summary(meta: dict, out: str) -> None:
    print(
        f"wrote {meta['num_episodes']} episodes ({meta['num_steps']} steps, success rate "
        f"{meta['success_rate']:.3f}) to {out}"
    )


if __name__ == "__main__":
    sys.exit(main())
