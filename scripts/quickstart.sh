#!/usr/bin/env bash
# The project's main job: RL fine-tuning of a tiny OpenVLA-OFT policy on MetaWorld, on the CPU.
#
#   bash scripts/quickstart.sh                       # PPO on drawer-close-v3 (config metaworld_ppo_tiny_cpu)
#   CONFIG=metaworld_grpo_tiny_cpu bash scripts/quickstart.sh      # the same with GRPO
#   CONFIG=libero_ppo_tiny_cpu bash scripts/quickstart.sh          # LIBERO-90 close the top drawer (libero_grpo_tiny_cpu: GRPO)
#                                                                  # (libero_ppo_pi0_tiny_cpu: a tiny pi0)
#   CONFIG=robotwin_ppo_tiny_cpu bash scripts/quickstart.sh        # RoboTwin press_stapler (also builds its env;
#                                                                  # robotwin_grpo_tiny_cpu: GRPO)
#   CONFIG=maniskill_put_on_plate_ppo_tiny_cpu bash scripts/quickstart.sh   # ManiSkill3 PutOnPlateInScene25Main-v3
#       (assets: $MS_ASSET_DIR / $MANISKILL_ASSET_DIR, else the stand-in pack written under $RUNS)
#   bash scripts/quickstart.sh runner.max_epochs=10  # extra Hydra overrides go to vla-train
#
# Steps: install (scripts/setup.sh; QUICKSTART_SKIP_SETUP=1 skips it), scripted-expert demos + supervised warm
# start (vla-sft), held-out evaluation before RL, RL with the local backend, evaluation after RL. The run folder
# (printed at the end) holds summary.json, tensorboard logs, checkpoints and the final policy.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/hydra_quote.sh
CONFIG="${CONFIG:-metaworld_ppo_tiny_cpu}"
RUNS="${RUNS:-runs}"
VENV="${VENV:-.venv}"

if [[ "${QUICKSTART_SKIP_SETUP:-0}" != "1" ]]; then
    VENV="$VENV" bash scripts/setup.sh
    if [[ "$CONFIG" == robotwin_* ]]; then  # RoboTwin runs in its own environment (reused when up to date)
        ROBOTWIN_VENV="$(bash scripts/setup_robotwin.sh | tee /dev/stderr | tail -n 1 | cut -d= -f2-)"
        export ROBOTWIN_VENV
    fi
fi
case "$VENV" in
    /*) export PATH="$VENV/bin:$PATH" ;;
    *) export PATH="$PWD/$VENV/bin:$PATH" ;;
esac
export MUJOCO_GL="${MUJOCO_GL:-egl}" PYOPENGL_PLATFORM="${PYOPENGL_PLATFORM:-egl}"

if [[ "$CONFIG" == maniskill_put_on_plate* && -z "${MS_ASSET_DIR:-}" ]]; then
    # no PutOnPlateInScene25 assets named: the stand-in pack (simple meshes, plain overlays, 1 MB, written once)
    mkdir -p "$RUNS"
    PACK="$(cd "$RUNS" && pwd)/maniskill-standin"
    python scripts/maniskill_standin_assets.py --out "$PACK"
    export MS_ASSET_DIR="$PACK" MANISKILL_ASSET_DIR="$PACK"
fi

start=$(date +%s)
echo "[quickstart] 1/2 demos + supervised warm start ($CONFIG)"
POLICY=$(vla-sft "$CONFIG" "runner.logger.log_path=$(hydra_quote "$RUNS")" | tail -n 1)
warm=$(date +%s)
echo "[quickstart] warm-start policy: $POLICY ($(( warm - start )) s)"

echo "[quickstart] 2/2 evaluate, RL, evaluate"
vla-train "$CONFIG" "runner.logger.log_path=$(hydra_quote "$RUNS")" "actor.model.model_path=$(hydra_quote "$POLICY")" "$@"
end=$(date +%s)
echo "[quickstart] finished in $(( end - start )) s after install (warm start $(( warm - start )) s," \
    "vla-train $(( end - warm )) s); 1-min load average at the end: $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo n/a)"
