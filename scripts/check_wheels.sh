#!/usr/bin/env bash
# Each package and the app as a user gets it from its wheel: built (wheel and sdist), checked by twine, installed
# alone into a fresh virtual environment (the CPU build of torch first, then the wheel with its declared
# dependencies and extras; the other packages of the monorepo only as the wheels built here, where it declares
# them), and its own tests run against the installed wheel from a folder that holds the tests but no source.
#
#   bash scripts/check_wheels.sh [PACKAGE ...]      # default: vla-algos vla-envs vla-models vla-infra train_embodied
#   WHEELS_PYTEST_ARGS='-m "not slow and not long"' bash scripts/check_wheels.sh vla-envs   # a quicker selection
#
# The test folder mirrors the repository's layout with the package's tests/ and README.md, the other packages'
# tests/ (test data), the root pytest settings (pyproject.toml, conftest.py) and scripts/ and benchmarks/ (some
# tests run those), and no src/: an
# import can only find the installed wheel, which each run checks (`__file__` under site-packages). Tools (build
# frontend, twine, pytest) are the test tools of requirements-dev.txt plus twine. Work folder: WHEELS_DIR
# (default: a temporary one, removed at the end). Prints one line per package and ends with the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
source scripts/installer.sh
# the installed wheels are compiled by the first import in each environment
export VLA_COMPILE_BYTECODE="${VLA_COMPILE_BYTECODE:-0}"
unset PYTHONDONTWRITEBYTECODE

declare -A SOURCE=([vla-algos]=packages/vla-algos [vla-envs]=packages/vla-envs [vla-models]=packages/vla-models
    [vla-infra]=packages/vla-infra [train_embodied]=apps/train_embodied)
declare -A EXTRAS=([vla-algos]="" [vla-envs]="[metaworld,maniskill,libero,robotwin]" [vla-models]="[triton]"
    [vla-infra]="[wandb,swanlab]" [train_embodied]="[plots]")
declare -A MODULE=([vla-algos]=vla_algos [vla-envs]=vla_envs [vla-models]=vla_models [vla-infra]=vla_infra
    [train_embodied]=train_embodied)
PACKAGES=("$@")
[[ ${#PACKAGES[@]} -eq 0 ]] && PACKAGES=(vla-algos vla-envs vla-models vla-infra train_embodied)
PYTEST_ARGS="${WHEELS_PYTEST_ARGS:--m \"not long\"}"

WORK="${WHEELS_DIR:-$(mktemp -d -t check_wheels.XXXXXX)}"
[[ -z "${WHEELS_DIR:-}" ]] && trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/dist"
installer_init

# ---- tools: build frontend and twine, in their own environment
TOOLS="$WORK/tools"
installer_venv "$TOOLS"
install "$TOOLS" build twine
summary=()

for pkg in "${PACKAGES[@]}"; do : "${SOURCE[$pkg]:?unknown package $pkg (known: ${!SOURCE[*]})}"; done
# every package is built (the app's dependencies come from these wheels), the ones asked for are tested
for pkg in vla-algos vla-envs vla-models vla-infra train_embodied; do
    src="${SOURCE[$pkg]}"
    echo "[wheels] $pkg: building wheel and sdist of $src"
    rm -rf "$WORK/build-$pkg"
    if ! "$TOOLS/bin/python" -m build --outdir "$WORK/build-$pkg" "$src" >"$WORK/build-$pkg.log" 2>&1; then
        cat "$WORK/build-$pkg.log"
        exit 1
    fi
    cp "$WORK/build-$pkg"/* "$WORK/dist/"
    "$TOOLS/bin/twine" check --strict "$WORK/build-$pkg"/*
done

for pkg in "${PACKAGES[@]}"; do
    src="${SOURCE[$pkg]}"
    module="${MODULE[$pkg]}"
    wheel=$(ls "$WORK/build-$pkg"/*.whl)
    venv="$WORK/venv-$pkg"
    echo "[wheels] $pkg: installing $(basename "$wheel")${EXTRAS[$pkg]} alone into a fresh environment"
    rm -rf "$venv"
    installer_venv "$venv"
    install "$venv" "${TORCH_INDEX[@]}" "$TORCH_SPEC"
    # the other packages of the monorepo come only from the wheels built here (--find-links)
    install "$venv" "${TORCH_INDEX[@]}" --find-links "$WORK/dist" "$TORCH_SPEC" "${wheel}${EXTRAS[$pkg]}" \
        -r requirements-dev.txt
    # the reference framework's wheel as setup.sh installs it: an oracle of the algorithm tests (with omegaconf, which
    # it imports) and the PutOnPlate task code
    install "$venv" --no-deps "rlinf==0.3.0"
    install "$venv" "${TORCH_INDEX[@]}" "$TORCH_SPEC" "omegaconf>=2.3"
    installer_check "$venv"

    tree="$WORK/tests-$pkg"
    rm -rf "$tree"
    mkdir -p "$tree/$src"
    cp -r "$src/tests" "$src/README.md" "$tree/$src/"
    for other in packages/*/tests; do  # test data other packages' tests keep (vla-models' official-layout folders)
        [[ -e "$tree/$other" ]] || { mkdir -p "$tree/$(dirname "$other")" && cp -r "$other" "$tree/$other"; }
    done
    cp -r pyproject.toml conftest.py scripts benchmarks "$tree/"
    (
        cd "$tree"
        "$venv/bin/python" - "$module" <<'EOF'
import importlib, sys
path = importlib.import_module(sys.argv[1]).__file__
assert "/site-packages/" in path, f"{sys.argv[1]} imported from {path}, not from the installed wheel"
print(f"[wheels] {sys.argv[1]} imported from {path}")
EOF
        echo "[wheels] $pkg: pytest $src/tests $PYTEST_ARGS"
        t0=$SECONDS
        set +e
        eval "\"$venv/bin/python\" -m pytest -q -p no:cacheprovider --timeout=600 $PYTEST_ARGS \"$src/tests\"" \
            >"$WORK/pytest-$pkg.log" 2>&1
        rc=$?
        set -e
        tail -n 1 "$WORK/pytest-$pkg.log" | sed "s/^/[wheels] $pkg: /"
        echo "$rc $((SECONDS - t0))" >"$WORK/rc-$pkg"
    )
    read -r rc secs <"$WORK/rc-$pkg"
    if [[ "$rc" != 0 ]]; then
        grep -E "^(FAILED|ERROR)" "$WORK/pytest-$pkg.log" | head -20 || true
    fi
    summary+=("$pkg: wheel+sdist built, twine ok, installed alone, tests rc=$rc in ${secs} s ($(tail -n 1 "$WORK/pytest-$pkg.log"))")
    rm -rf "$venv"  # the next package's environment starts from nothing
done

echo "[wheels] summary ($(date -u +%F), load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)):"
failed=0
for line in "${summary[@]}"; do
    echo "  $line"
    [[ "$line" == *"rc=0 "* ]] || failed=1
done
exit "$failed"
