#!/usr/bin/env bash
# Headless Chromium and its WebDriver from Debian's packages, for the docs site's browser test (tests/docs/).
# Skipped when both are present, or without root/sudo or apt-get (the test then fails under VLA_REQUIRE_ALL=1,
# naming this script).
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    echo "[browser] chromium and chromedriver already installed"
    exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then SUDO="sudo"; else
        echo "[browser] not root and no sudo: skipping (install chromium and chromium-driver yourself)"
        exit 0
    fi
fi
if ! command -v apt-get >/dev/null; then
    echo "[browser] no apt-get: install Chromium and its chromedriver with your package manager"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver
echo "[browser] installed $(chromium --version 2>/dev/null)"
