#!/usr/bin/env bash
# Build a fresh environment and run the tests (the README's test command; .ci/run calls it).
#   bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
export VENV="${VENV:-.venv-test}"
bash scripts/setup.sh --fresh
# RoboTwin runs in its own environment (its pins clash with this one); built once, reused while unchanged.
# The RoboTwin integration tests (packages/vla-envs/tests/test_robotwin_real.py) find it through ROBOTWIN_VENV.
export ROBOTWIN_VENV="${ROBOTWIN_VENV:-$PWD/.venv-robotwin}"
bash scripts/setup_robotwin.sh
# Headless Chromium for the docs site's browser test (tests/docs/), from Debian's packages where apt can install it.
if [[ "${VLA_SKIP_SYSTEM_DEPS:-0}" != "1" ]]; then bash scripts/install_browser.sh || echo "[browser] not installed"; fi
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
# Strict: a test skipped for any reason other than a missing CUDA GPU fails (a broken extra must not hide).
export VLA_REQUIRE_ALL="${VLA_REQUIRE_ALL:-1}"
# Tests marked `long` (minutes each on 2 cores, or paths other tests run; tests/shipped/) run only with
# VLA_LONG_TESTS=1, which keeps the default run (CI's) under 25 minutes; a `-m` of your own replaces this selection.
select=(-m "not long")
[[ "${VLA_LONG_TESTS:-0}" == 1 ]] && select=()
# Two pytest workers (pytest-xdist), a test file each at a time: most tests wait on simulator, Ray or torch.distributed
# processes, so two files overlap well on 2 cores; a file's module fixtures (Ray clusters, simulators) stay in one
# worker. VLA_TEST_WORKERS=0 runs in one process.
workers=(-n "${VLA_TEST_WORKERS:-2}" --dist loadfile)
[[ "${VLA_TEST_WORKERS:-2}" == 0 ]] && workers=()
# --durations: the slowest tests of each run are printed, to see where the suite's time goes
exec "$VENV/bin/python" -m pytest -q --timeout=300 --durations=25 "${workers[@]}" "${select[@]}" "$@"
