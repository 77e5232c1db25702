"""`vla-envs` command line: `vla-envs demos ENV_TYPE ...` (env types whose adapter declares command-line demos),
`vla-envs tasks ENV_TYPE`."""

from __future__ import annotations

import argparse
import sys

from vla_envs.registry import adapters, get_adapter, resolve_ref


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vla-envs", description="vla-envs tools")
    sub = parser.add_subparsers(dest="command", required=True)

    tasks = sub.add_parser("tasks", help="list the tasks of an env type")
    tasks.add_argument("env_type")

    demos = sub.add_parser("demos", help="generate scripted-expert demonstrations")
    with_cli = [a.name for a in adapters() if a.demos is not None and a.demos.from_cli is not None]
    demos.add_argument("env_type", choices=with_cli)
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
    demos.add_argument(
        "--render-mesh-grid", type=float, default=0.0, help="draw meshes merged on this grid (metres; 0: off)"
    )
    demos.add_argument("--workers", type=int, default=2, help="worker processes (0 = in-process)")
    demos.add_argument("--seed", type=int, default=0)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `vla-envs` console script."""
    args = _parser().parse_args(argv)
    if args.command == "tasks":
        print("\n".join(get_adapter(args.env_type).list_tasks()))
        return 0
    demos = get_adapter(args.env_type).demos
    assert demos is not None and demos.from_cli is not None  # argparse allowed only such env types
    settings = resolve_ref(demos.from_cli)(args)
    meta = resolve_ref(demos.generate)(args.out, num_workers=args.workers, **settings)
    _print_summary(meta, args.out)
    return 0


def _print_summary(meta: dict, out: str) -> None:
    print(
        f"wrote {meta['num_episodes']} episodes ({meta['num_steps']} steps, success rate "
        f"{meta['success_rate']:.3f}) to {out}"
    )


if __name__ == "__main__":
    sys.exit(main())
