#!/usr/bin/env bash
# Build a fresh environment and run every test (the README's test command; .ci/run calls it).
#   bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
export VENV="${VENV:-.venv-test}"
bash scripts/setup.sh --fresh
# RoboTwin runs in its own environment (its pins clash with this one); built once, reused while unchanged.
# The RoboTwin integration tests (packages/vla-envs/tests/test_robotwin_real.py) find it through ROBOTWIN_VENV.
export ROBOTWIN_VENV="${ROBOTWIN_VENV:-$PWD/.venv-robotwin}"
bash scripts/setup_robotwin.sh
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
# Strict: a test skipped for any reason other than a missing CUDA GPU fails (a broken extra must not hide).
export VLA_REQUIRE_ALL="${VLA_REQUIRE_ALL:-1}"
exec "$VENV/bin/python" -m pytest -q --timeout=300 "$@"
