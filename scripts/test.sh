#!/usr/bin/env bash
# The one test command: installs what is missing, starts the services, runs every test layer.
#   scripts/test.sh [pytest args...]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/bootstrap.sh
bash scripts/services.sh up
bash scripts/services.sh test-tools
bash scripts/lint.sh
exec .venv/bin/python -m pytest "$@"
