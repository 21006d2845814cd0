#!/usr/bin/env bash
# Creates .venv (if missing) and installs replicad with its test extras into it. Idempotent.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[test${EXTRAS:+,$EXTRAS}]" --group dev
  rm -f .venv/.installed-*; touch "$stamp"
fi
