#!/usr/bin/env python3
"""Download a checkpoint (or asset) repository the reference guides name, through huggingface_hub.

    python scripts/download_checkpoint.py RLinf/RLinf-OpenVLAOFT-LIBERO-130-Base-Lora [--revision COMMIT]
    python scripts/download_checkpoint.py RLinf/maniskill_assets --repo-type dataset --local-dir assets

- `--revision` pins a branch, tag or commit; the commit that was fetched is printed, to pin it next time.
- An interrupted download resumes where it stopped when the command is run again (huggingface_hub keeps the
  partial files in its cache).
- `HF_ENDPOINT` (e.g. https://hf-mirror.com, the guides' mirror) and `HF_HOME` / `HF_HUB_CACHE` are honoured;
  with `HF_HUB_OFFLINE=1` it resolves from the local cache only.

It prints where the files are and, for a model, the config key to set (`actor.model.model_path=...`). Nothing else
in this project downloads: runs read local folders only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo_id", help="e.g. RLinf/RLinf-OpenVLAOFT-RoboTwin-SFT-place_empty_cup")
    parser.add_argument("--revision", default=None, help="branch, tag or commit (default: main)")
    parser.add_argument("--repo-type", default="model", choices=("model", "dataset"))
    parser.add_argument("--local-dir", default=None, help="copy the files here (default: the hub cache)")
    args = parser.parse_args(argv)

    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
    try:
        if offline and args.local_dir is not None:
            # offline, the hub resolves a revision from its cache only: copy the cached snapshot into local_dir
            cached = snapshot_download(args.repo_id, revision=args.revision, repo_type=args.repo_type)
            shutil.copytree(cached, args.local_dir, dirs_exist_ok=True)
            print(f"revision: {os.path.basename(os.path.normpath(cached))}")
            path = args.local_dir
        else:
            path = snapshot_download(
                args.repo_id, revision=args.revision, repo_type=args.repo_type, local_dir=args.local_dir
            )
    except LocalEntryNotFoundError:
        what = f"{args.repo_id}@{args.revision or 'main'}"
        hint = (
            "it is not in the local cache and HF_HUB_OFFLINE is set (unset it, or fill the cache on a machine "
            "with a network and copy HF_HOME)"
            if offline
            else f"{endpoint} is not reachable (set HF_ENDPOINT to a mirror, e.g. https://hf-mirror.com)"
        )
        print(f"download_checkpoint: {what}: {hint}", file=sys.stderr)
        return 1
    except HfHubHTTPError as exc:
        print(f"download_checkpoint: {args.repo_id}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    commit = os.path.basename(os.path.normpath(path)) if args.local_dir is None else None
    print(f"files: {path}")
    if commit:
        print(f"revision: {commit} (pin it with --revision {commit})")
    if args.repo_type == "model":
        print(f"set: actor.model.model_path={path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
