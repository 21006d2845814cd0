#!/usr/bin/env bash
# The one test command: installs what is missing, starts the services, runs every test layer.
#   scripts/test.sh [pytest options...]   the whole suite: test files in two pytest-xdist
#       workers, then the `serial` tests alone (a quiet primary, or Spark); a test that failed
#       beside the other worker runs once more alone (at most 10) and must pass then
#   scripts/test.sh <path or node id> [pytest args...]   just those tests, one process
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/bootstrap.sh
bash scripts/services.sh up
bash scripts/services.sh test-tools
bash scripts/services.sh spark-jars >/dev/null  # MySQL Connector/J for spark verify's tests
bash scripts/lint.sh
PY=.venv/bin/python
for arg in "$@"; do
  case "$arg" in -*) ;; *) exec "$PY" -m pytest "$@" ;; esac
done

report=$(mktemp -d)/parallel.xml
set +e
"$PY" -m pytest -n "${REPLICAD_TEST_WORKERS:-2}" --dist loadfile -m "not serial" \
  --junitxml="$report" "$@"
parallel=$?
set -e
if [ "$parallel" = 1 ]; then  # 1: tests failed (others: interrupted, usage, internal error)
  mapfile -t failed < <("$PY" scripts/failed_tests.py "$report")
  if [ "${#failed[@]}" -ge 1 ] && [ "${#failed[@]}" -le 10 ]; then
    echo "== ${#failed[@]} test(s) failed beside the other worker; once more, alone:"
    printf '   %s\n' "${failed[@]}"
    set +e; "$PY" -m pytest "$@" "${failed[@]}"; parallel=$?; set -e
  fi
fi
set +e
"$PY" -m pytest -m serial "$@"
serial=$?
set -e
echo "parallel tests: exit $parallel; serial tests: exit $serial"
[ "$parallel" = 0 ] && [ "$serial" = 0 ]
