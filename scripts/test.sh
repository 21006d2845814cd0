#!/usr/bin/env bash
# The one test command: installs what is missing, starts the services, runs every test layer.
#   scripts/test.sh [pytest options...]   the whole suite: test files in two pytest-xdist
#       workers and, beside them, Spark's tests (`serial`, tests/integration/test_spark_*.py)
#       one at a time at a lower CPU priority; then the other `serial` tests alone (they need
#       a quiet primary); a test that failed beside the other worker runs once more alone (at
#       most 10) and must pass then
#   scripts/test.sh <path or node id> [pytest args...]   just those tests, one process
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/bootstrap.sh
bash scripts/services.sh up
# On-request services some tests use, started here once: two test processes starting one
# at the same moment would race for its port.
bash scripts/services.sh up registry s3
bash scripts/services.sh test-tools
bash scripts/services.sh spark-jars >/dev/null  # MySQL Connector/J for spark verify's tests
bash scripts/lint.sh
PY=.venv/bin/python
for arg in "$@"; do
  case "$arg" in -*) ;; *) exec "$PY" -m pytest "$@" ;; esac
done

work=$(mktemp -d)
report=$work/parallel.xml
# Spark's tests compute while most of the others wait (outages, failovers): run them beside
# the parallel phase, niced so that the waiting tests' timing is not theirs to pay.
spark_tests=(tests/integration/test_spark_*.py)
# Its own base temp dir: pytest prunes the oldest numbered ones when a new session starts.
nice -n 10 "$PY" -m pytest -m serial --basetemp="$work/spark-tmp" "$@" "${spark_tests[@]}" \
  >"$work/spark.log" 2>&1 &
spark_pid=$!
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
wait "$spark_pid"
spark=$?
echo "== Spark's tests (run beside the parallel phase):"
cat "$work/spark.log"
"$PY" -m pytest -m serial "$@" --ignore-glob='tests/integration/test_spark_*.py'
serial=$?
set -e
echo "parallel tests: exit $parallel; Spark's tests: exit $spark; serial tests: exit $serial"
[ "$parallel" = 0 ] && [ "$spark" = 0 ] && [ "$serial" = 0 ]
