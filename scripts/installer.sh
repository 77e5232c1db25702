# The package installer of scripts/setup.sh and scripts/check_wheels.sh (sourced by them, not run).
#
# uv (the PyPI package `uv`, fetched once with pip into a cache folder and reused), given pip's own configuration
# (index URLs, find-links, constraint files, certificate: scripts/installer_sources.py), so both take packages from
# the same places; VLA_INSTALLER=pip installs with pip alone (also used when uv cannot be had).
# The CPU build of torch comes from a configured find-links folder when one holds it, else from the PyTorch CPU
# index (TORCH_INDEX_URL; empty: none).
#
#   installer_init            sets INSTALLER (uv or pip), UV, TORCH_INDEX (the arguments that add the CPU index)
#   installer_venv DIR        a new virtual environment (with pip inside)
#   install DIR ARGS...       `pip install ARGS` into the environment DIR, with uv or pip
#   installer_check DIR       fails when DIR holds a CUDA build of torch (CPU index asked for), torchvision or timm

PY="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
TORCH_INDEX_URL="${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}"
UV_SPEC="${UV_SPEC:-uv==0.13.9}"
UV_HOME="${VLA_UV_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/vla-rl/uv-${UV_SPEC##*=}}"

installer_init() {
    INSTALLER="${VLA_INSTALLER:-uv}"
    mapfile -t _sources < <("$PY" scripts/installer_sources.py)
    if [[ "$INSTALLER" == "uv" ]]; then
        UV="${UV:-$(command -v uv || true)}"
        if [[ -z "$UV" ]]; then
            UV="$UV_HOME/bin/uv"
            if [[ ! -x "$UV" ]]; then
                echo "[installer] fetching $UV_SPEC with pip into $UV_HOME (once)"
                rm -rf "$UV_HOME"
                if ! "$PY" -m pip install --disable-pip-version-check -q --root-user-action=ignore \
                    --target "$UV_HOME" "$UV_SPEC"; then
                    echo "[installer] could not install $UV_SPEC: installing with pip instead"
                    INSTALLER=pip
                fi
            fi
        fi
    fi
    _index_args=()  # where packages come from (uv venv takes these for its seed packages)
    _constraints=()
    local i a
    for ((i = 0; i < ${#_sources[@]}; i++)); do
        a="${_sources[i]}"
        case "$a" in
            CERT=*) export SSL_CERT_FILE="${SSL_CERT_FILE:-${a#CERT=}}" ;;
            TIMEOUT=*) export UV_HTTP_TIMEOUT="${UV_HTTP_TIMEOUT:-${a#TIMEOUT=}}" ;;
            --constraint) _constraints+=("$a" "${_sources[i + 1]}"); i=$((i + 1)) ;;
            *) _index_args+=("$a") ;;
        esac
    done
    _uv_args=(-q "${_index_args[@]}" "${_constraints[@]}")
    # .pyc files: uv leaves them to the first import, which writes those of the modules a run imports; under
    # PYTHONDONTWRITEBYTECODE=1 it cannot, and every process would compile them again: then they are written
    # now, for every module, as pip does (VLA_COMPILE_BYTECODE=1/0 decides either way)
    if [[ "${VLA_COMPILE_BYTECODE:-${PYTHONDONTWRITEBYTECODE:+1}}" == 1 ]]; then _uv_args+=(--compile-bytecode); fi
    TORCH_INDEX=()
    if [[ -n "$TORCH_INDEX_URL" ]]; then
        TORCH_INDEX=(--extra-index-url "$TORCH_INDEX_URL")
        for a in "${_sources[@]}"; do
            if [[ -d "$a" ]] && compgen -G "$a/torch-${TORCH_SPEC#torch==}+cpu-*.whl" >/dev/null; then TORCH_INDEX=(); fi
        done
    fi
}

installer_venv() {
    if [[ "$INSTALLER" == "uv" ]]; then
        "$UV" venv -q --seed --python "$PY" "${_index_args[@]}" "$1"  # --seed: pip inside, as `python -m venv`
    else
        "$PY" -m venv "$1"
    fi
}

install() {
    local venv="$1"
    shift
    if [[ "$INSTALLER" == "uv" ]]; then
        "$UV" pip install --python "$venv/bin/python" "${_uv_args[@]}" "$@"
    else
        "$venv/bin/python" -m pip install --disable-pip-version-check -q "$@"
    fi
}

installer_check() {
    "$1/bin/python" - "$TORCH_INDEX_URL" <<'EOF'
import importlib.metadata as m
import sys

cpu = sys.argv[1].rstrip("/").endswith("/cpu")
names = sorted({(d.metadata["Name"] or "").lower() for d in m.distributions()})
torch = m.version("torch") if "torch" in names else ""
# CUDA's runtime wheels are nvidia-*; nvidia-ml-py (NVML's Python bindings, a monitoring library) is not one of them
bad = [n for n in names if n in ("torchvision", "timm") or (cpu and n.startswith("nvidia-") and n != "nvidia-ml-py")]
if cpu and "+" in torch and not torch.endswith("+cpu"):
    bad.append(f"torch {torch}")
if bad:
    sys.exit(f"[installer] error: the environment holds {', '.join(bad)}: only the CPU build of torch belongs here")
EOF
}
