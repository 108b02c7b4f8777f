#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the whole suite: ruff, mypy, pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check . && ruff format --check .
echo "== mypy"; mypy
echo "== pytest"; pytest -q --headless "$@"
