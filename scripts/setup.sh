#!/usr/bin/env bash
# Set up a Python environment with every package and app of the monorepo installed editable.
#
#   bash scripts/setup.sh            # create or update .venv
#   VENV=/tmp/v bash scripts/setup.sh --fresh   # build a brand-new environment (what CI does)
#
# The installer is uv, given pip's own configuration; VLA_INSTALLER=pip installs with pip (scripts/installer.sh).
# Order matters: the CPU build of torch is installed first (TORCH_SPEC; from a configured find-links folder, else
# the PyTorch CPU index TORCH_INDEX_URL), so nothing that depends on torch can pull a multi-GB CUDA build.
# torchvision and timm are never installed (they break transformers beside CPU torch): checked at the end.
# The last line gives the time of each step.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
EXTRAS="${VLA_EXTRAS:-metaworld,maniskill,libero,robotwin}"
source scripts/installer.sh

now_us() { local t="${EPOCHREALTIME:-}"; if [[ -n "$t" ]]; then echo "${t//[.,]/}"; else echo "$(($(date +%s) * 1000000))"; fi; }
t_start=$(now_us)
t_step=$t_start
steps=()
step_done() {  # "<name> <seconds>" of the step just finished
    local now
    now=$(now_us)
    local tenths=$(((now - t_step) / 100000))
    steps+=("$1 $((tenths / 10)).$((tenths % 10)) s")
    t_step=$now
}

if [[ "${1:-}" == "--fresh" && -e "$VENV" ]]; then
    rm -rf "$VENV"
    step_done "remove-old"
fi

if [[ "${VLA_SKIP_SYSTEM_DEPS:-0}" != "1" ]]; then
    bash scripts/install_system_deps.sh
    step_done "system-deps"
fi

installer_init
step_done "installer"

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "[setup] creating virtual environment $VENV"
    installer_venv "$VENV"
    step_done "venv"
fi

echo "[setup] installing $TORCH_SPEC (CPU build) first${TORCH_INDEX[1]:+ from ${TORCH_INDEX[1]}}"
install "$VENV" "${TORCH_INDEX[@]}" "$TORCH_SPEC"
step_done "torch"

echo "[setup] installing the packages and the app (editable, extras: $EXTRAS) with $INSTALLER"
# torch pinned to the build just installed: a CPU build's version ends in +cpu, which no other index has
TORCH_PIN="torch==$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))')"
install "$VENV" "${TORCH_INDEX[@]}" "$TORCH_PIN" \
    -e packages/vla-algos \
    -e "packages/vla-envs[$EXTRAS]" \
    -e "packages/vla-models[triton]" \
    -e "packages/vla-infra[wandb,swanlab]" \
    -e "apps/train_embodied[plots]" \
    -r requirements-dev.txt
step_done "packages"
# The reference framework's wheel, without its heavy run dependencies: its registered ManiSkill task family
# (PutOnPlateInScene25*) for vla-envs[maniskill], and its algorithm functions as the parity oracle of the tests.
install "$VENV" --no-deps "rlinf==0.3.0"
step_done "rlinf"

installer_check "$VENV"
step_done "check"
total=$((($(now_us) - t_start) / 1000000))
echo "[setup] done in $total s ($(IFS=';'; echo "${steps[*]}" | sed 's/;/, /g')): Python" \
    "$("$VENV/bin/python" -c 'import sys; print(sys.version.split()[0])'), ${TORCH_PIN#torch==}, $INSTALLER"
