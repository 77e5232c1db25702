#!/usr/bin/env bash
# Drop-in for the reference documents' launcher:
#
#   bash scripts/run_embodiment.sh CONFIG [KEY=VALUE ...]
#   bash scripts/run_embodiment.sh maniskill_ppo_openvla actor.model.model_path=/models/openvla-7b-rlvla-warmup
#
# CONFIG is a config name of apps/train_embodied/configs (vla-train --list) or a YAML path. Like the reference
# script it sets the rendering environment, puts the run under logs/<timestamp>-<config>/ and tees the console
# to run_embodiment.log there. With runner.resume_dir=auto it continues the newest logs/<timestamp>-<config>/
# folder that holds a complete checkpoint (a fresh folder when there is none). Evaluate with
# scripts/eval_embodiment.sh CONFIG (runner.only_eval=true).
set -euo pipefail
if [[ $# -lt 1 ]]; then
    echo "usage: bash scripts/run_embodiment.sh CONFIG [KEY=VALUE ...]" >&2
    exit 2
fi
REPO="$(cd "$(dirname "$0")/.." && pwd)"
source "$REPO/scripts/hydra_quote.sh"
CONFIG="$1"
shift
export MUJOCO_GL="${MUJOCO_GL:-egl}" PYOPENGL_PLATFORM="${PYOPENGL_PLATFORM:-egl}"
VLA_TRAIN="${VLA_TRAIN:-vla-train}"
if ! command -v "$VLA_TRAIN" >/dev/null 2>&1 && [[ -x "$REPO/.venv/bin/vla-train" ]]; then
    VLA_TRAIN="$REPO/.venv/bin/vla-train"
fi
NAME="$(basename "$CONFIG" .yaml)"
LOGS_ROOT="${LOGS_ROOT:-$REPO/logs}"  # where the run folders <timestamp>-<config> go
if [[ -z "${LOG_DIR:-}" ]] && printf '%s\n' "$@" | grep -qx 'runner.resume_dir=auto'; then
    # the newest run of this config with a complete checkpoint (the folder names sort by their timestamp)
    PYTHON="$(dirname "$(command -v "$VLA_TRAIN")")/python"
    [[ -x "$PYTHON" ]] || PYTHON=python3
    LOG_DIR="$("$PYTHON" -c '
import sys
from pathlib import Path

from train_embodied.checkpointing import latest_checkpoint

runs = sorted(Path(sys.argv[1]).glob(f"*-{sys.argv[2]}"), reverse=True)
print(next((str(r) for r in runs if latest_checkpoint(r / "checkpoints") is not None), ""))
' "$LOGS_ROOT" "$NAME")"
    if [[ -n "$LOG_DIR" ]]; then
        echo "[run_embodiment] runner.resume_dir=auto: continuing $LOG_DIR"
    fi
fi
LOG_DIR="${LOG_DIR:-$LOGS_ROOT/$(date +'%Y%m%d-%H:%M:%S')-$NAME}"
mkdir -p "$LOG_DIR"
LOG_DIR_OVERRIDE="runner.logger.log_dir=$(hydra_quote "$LOG_DIR")"
echo "[run_embodiment] $VLA_TRAIN $CONFIG $LOG_DIR_OVERRIDE $*" | tee -a "$LOG_DIR/run_embodiment.log"
"$VLA_TRAIN" "$CONFIG" "$LOG_DIR_OVERRIDE" "$@" 2>&1 | tee -a "$LOG_DIR/run_embodiment.log"
exit "${PIPESTATUS[0]}"
