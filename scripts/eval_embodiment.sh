#!/usr/bin/env bash
# Evaluation launcher of the reference documents (RoboTwin guide): the training config, evaluated only.
#
#   bash scripts/eval_embodiment.sh CONFIG [KEY=VALUE ...]
#   bash scripts/eval_embodiment.sh robotwin_adjust_bottle_ppo_OpenPI_eval actor.model.model_path=/models/pi0
#
# It is scripts/run_embodiment.sh with runner.only_eval=true: the same rendering environment, a run folder
# logs/<timestamp>-<config>/ with run_embodiment.log; the env.eval section says what is evaluated.
set -euo pipefail
if [[ $# -lt 1 ]]; then
    echo "usage: bash scripts/eval_embodiment.sh CONFIG [KEY=VALUE ...]" >&2
    exit 2
fi
exec bash "$(cd "$(dirname "$0")" && pwd)/run_embodiment.sh" "$1" runner.only_eval=true "${@:2}"
