#!/usr/bin/env bash
# The static checks, no services needed: ruff (lint and format) and mypy (config in
# pyproject.toml [tool.mypy]). Runs every check, then fails if any of them failed.
#   scripts/lint.sh                       uses .venv (scripts/bootstrap.sh makes it)
#   PYTHON=/path/to/python scripts/lint.sh  another environment with the test extra
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-.venv/bin/python}
status=0
"$PY" -m ruff check replicad tests bench || status=1
"$PY" -m ruff format --check replicad tests bench || status=1
"$PY" -m mypy replicad/ || status=1
exit $status
