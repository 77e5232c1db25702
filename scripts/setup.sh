#!/usr/bin/env bash
# Set up a Python environment with every package and app of the monorepo installed editable.
#
#   bash scripts/setup.sh            # create or update .venv
#   VENV=/tmp/v bash scripts/setup.sh --fresh   # build a brand-new environment (what CI does)
#
# Order matters: the CPU build of torch is installed first, so nothing that depends on torch can pull
# a multi-GB CUDA build. torchvision and timm are never installed (they break transformers beside CPU torch).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
EXTRAS="${VLA_EXTRAS:-metaworld,maniskill,libero,robotwin}"

if [[ "${1:-}" == "--fresh" ]]; then rm -rf "$VENV"; fi

if [[ "${VLA_SKIP_SYSTEM_DEPS:-0}" != "1" ]]; then
    bash scripts/install_system_deps.sh
fi

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "[setup] creating virtual environment $VENV"
    "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)

echo "[setup] installing $TORCH_SPEC (CPU build) first"
"${PIP[@]}" "$TORCH_SPEC"

echo "[setup] installing the packages and the app (editable, extras: $EXTRAS)"
"${PIP[@]}" "$TORCH_SPEC" \
    -e packages/vla-algos \
    -e "packages/vla-envs[$EXTRAS]" \
    -e "packages/vla-models[triton]" \
    -e "packages/vla-infra[wandb,swanlab]" \
    -e "apps/train_embodied[plots]" \
    -r requirements-dev.txt
# The reference framework's wheel, without its heavy run dependencies: its registered ManiSkill task family
# (PutOnPlateInScene25*) for vla-envs[maniskill], and its algorithm functions as the parity oracle of the tests.
"${PIP[@]}" --no-deps "rlinf==0.3.0"
# Post-install fix-ups that a resolver cannot express (see packages/vla-envs/README.md).
if [[ -f scripts/post_install.sh ]]; then VENV="$VENV" bash scripts/post_install.sh; fi
echo "[setup] done: $("$VENV/bin/python" -c 'import torch, sys; print(sys.version.split()[0], "torch", torch.__version__)')"
