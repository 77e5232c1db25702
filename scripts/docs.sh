#!/usr/bin/env bash
# Build the documentation site (mkdocs.yml, docs/) strictly into site/: a broken link or anchor, a page missing
# from the navigation, a docstring that does not render, or a configuration reference that no longer matches
# the config code fails it. tests/docs/ runs the same checks in the test command.
#
#   bash scripts/docs.sh          # check the configuration reference, build site/
#   bash scripts/docs.sh serve    # serve the site on http://127.0.0.1:8000 while you edit
#   python scripts/config_reference.py   # rewrite docs/reference/configuration.md from the config code
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="${PYTHON:-$VENV/bin/python}"
export NO_MKDOCS_2_WARNING=1   # the theme's banner about its successor: not a build problem
"$PY" scripts/config_reference.py --check
if [[ "${1:-}" == "serve" ]]; then
    exec "$PY" -m mkdocs serve --strict --dev-addr 127.0.0.1:8000
fi
exec "$PY" -m mkdocs build --strict --site-dir "${SITE_DIR:-site}"
