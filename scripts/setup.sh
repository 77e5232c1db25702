#!/usr/bin/env bash
# Set up a Python environment with every package and app of the monorepo installed editable.
#
#   bash scripts/setup.sh            # create or update .venv
#   VENV=/tmp/v bash scripts/setup.sh --fresh   # build a brand-new environment (what CI does)
#
# The installer is uv (the PyPI package `uv`, fetched once with pip into a cache folder and reused) given pip's
# own configuration (index URLs, find-links, constraint files, certificate: scripts/installer_sources.py), so both
# take packages from the same places; VLA_INSTALLER=pip installs with pip alone (also used when uv cannot be had).
# Order matters: the CPU build of torch is installed first, from the PyTorch CPU index (TORCH_INDEX_URL; empty:
# none) unless a configured find-links folder holds it, so nothing that depends on torch can pull a multi-GB CUDA
# build. torchvision and timm are never installed (they break transformers beside CPU torch): checked at the end.
# The last line gives the time of each step.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
TORCH_INDEX_URL="${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}"
EXTRAS="${VLA_EXTRAS:-metaworld,maniskill,libero,robotwin}"
INSTALLER="${VLA_INSTALLER:-uv}"
UV_SPEC="${UV_SPEC:-uv==0.13.9}"
UV_HOME="${VLA_UV_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/vla-rl/uv-${UV_SPEC##*=}}"

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

# ---- the installer's sources (pip's configuration) and the installer
mapfile -t SOURCES < <("$PY" scripts/installer_sources.py)
if [[ "$INSTALLER" == "uv" ]]; then
    UV="${UV:-$(command -v uv || true)}"
    if [[ -z "$UV" ]]; then
        UV="$UV_HOME/bin/uv"
        if [[ ! -x "$UV" ]]; then
            echo "[setup] fetching $UV_SPEC with pip into $UV_HOME (once)"
            rm -rf "$UV_HOME"
            if ! "$PY" -m pip install --disable-pip-version-check -q --target "$UV_HOME" "$UV_SPEC"; then
                echo "[setup] could not install $UV_SPEC: installing with pip instead"
                INSTALLER=pip
            fi
        fi
    fi
    step_done "uv"
fi
if [[ "$INSTALLER" == "uv" ]]; then
    index_args=()  # where packages come from (uv venv takes these for its seed packages)
    constraints=()
    for ((i = 0; i < ${#SOURCES[@]}; i++)); do
        a="${SOURCES[i]}"
        case "$a" in
            CERT=*) export SSL_CERT_FILE="${SSL_CERT_FILE:-${a#CERT=}}" ;;
            TIMEOUT=*) export UV_HTTP_TIMEOUT="${UV_HTTP_TIMEOUT:-${a#TIMEOUT=}}" ;;
            --constraint) constraints+=("$a" "${SOURCES[i + 1]}"); i=$((i + 1)) ;;
            *) index_args+=("$a") ;;
        esac
    done
    uv_args=(-q "${index_args[@]}" "${constraints[@]}")
    # .pyc files: uv leaves them to the first import, which writes those of the modules a run imports; under
    # PYTHONDONTWRITEBYTECODE=1 it cannot, and every process would compile them again: then they are written
    # now, for every module, as pip does (VLA_COMPILE_BYTECODE=1/0 decides either way)
    if [[ "${VLA_COMPILE_BYTECODE:-${PYTHONDONTWRITEBYTECODE:+1}}" == 1 ]]; then uv_args+=(--compile-bytecode); fi
    install() { "$UV" pip install --python "$VENV/bin/python" "${uv_args[@]}" "$@"; }
else
    install() { "$VENV/bin/python" -m pip install --disable-pip-version-check -q "$@"; }
fi

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "[setup] creating virtual environment $VENV"
    if [[ "$INSTALLER" == "uv" ]]; then
        "$UV" venv -q --seed --python "$PY" "${index_args[@]}" "$VENV"  # --seed: pip inside, as `python -m venv`
    else
        "$PY" -m venv "$VENV"
    fi
    step_done "venv"
fi

# ---- torch, CPU build: from a configured find-links folder, else from the PyTorch CPU index
torch_index=()
if [[ -n "$TORCH_INDEX_URL" ]]; then
    torch_index=(--extra-index-url "$TORCH_INDEX_URL")
    for a in "${SOURCES[@]}"; do
        if [[ -d "$a" ]] && compgen -G "$a/torch-${TORCH_SPEC#torch==}+cpu-*.whl" >/dev/null; then torch_index=(); fi
    done
fi
echo "[setup] installing $TORCH_SPEC (CPU build) first${torch_index[1]:+ from ${torch_index[1]}}"
install "${torch_index[@]}" "$TORCH_SPEC"
step_done "torch"

echo "[setup] installing the packages and the app (editable, extras: $EXTRAS) with $INSTALLER"
# torch pinned to the build just installed: a CPU build's version ends in +cpu, which no other index has
TORCH_PIN="torch==$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))')"
install "${torch_index[@]}" "$TORCH_PIN" \
    -e packages/vla-algos \
    -e "packages/vla-envs[$EXTRAS]" \
    -e "packages/vla-models[triton]" \
    -e "packages/vla-infra[wandb,swanlab]" \
    -e "apps/train_embodied[plots]" \
    -r requirements-dev.txt
step_done "packages"
# The reference framework's wheel, without its heavy run dependencies: its registered ManiSkill task family
# (PutOnPlateInScene25*) for vla-envs[maniskill], and its algorithm functions as the parity oracle of the tests.
install --no-deps "rlinf==0.3.0"
step_done "rlinf"

# The CPU build of torch only (when the CPU index is the one asked for), never torchvision or timm.
"$VENV/bin/python" - "$TORCH_INDEX_URL" <<'EOF'
import importlib.metadata as m
import sys

cpu = sys.argv[1].rstrip("/").endswith("/cpu")
names = sorted({(d.metadata["Name"] or "").lower() for d in m.distributions()})
torch = m.version("torch")
# CUDA's runtime wheels are nvidia-*; nvidia-ml-py (NVML's Python bindings, a monitoring library) is not one of them
bad = [n for n in names if n in ("torchvision", "timm") or (cpu and n.startswith("nvidia-") and n != "nvidia-ml-py")]
if cpu and "+" in torch and not torch.endswith("+cpu"):
    bad.append(f"torch {torch}")
if bad:
    sys.exit(f"[setup] error: the environment holds {', '.join(bad)}: only the CPU build of torch belongs here")
EOF
step_done "check"
total=$((($(now_us) - t_start) / 1000000))
echo "[setup] done in $total s ($(IFS=';'; echo "${steps[*]}" | sed 's/;/, /g')): Python" \
    "$("$VENV/bin/python" -c 'import sys; print(sys.version.split()[0])'), ${TORCH_PIN#torch==}, $INSTALLER"
