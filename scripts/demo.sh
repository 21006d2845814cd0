#!/usr/bin/env bash
# The main job on a fresh machine: start the local demo primary (MariaDB on 127.0.0.1:3306),
# run `replicad run` against it with the embedded defaults (changes as JSON lines on stdout,
# position in a local file), write demo changes, and show replicad streaming them.
#   scripts/demo.sh            stream for a few seconds, then stop cleanly (SIGTERM)
#   DEMO_SECONDS=60 scripts/demo.sh   stream longer
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/bootstrap.sh
bash scripts/services.sh up mariadb
M="mariadb --defaults-file=.services/mariadb/my.cnf"
DEMO=.services/demo
mkdir -p "$DEMO"
# Each demo starts at the primary's latest position (a kept position would replay everything
# written since the previous demo, which is right for a daemon but noisy for a demo).
rm -f "$DEMO"/position*.json
cat >"$DEMO/config.yaml" <<YAML
pipeline: demo
source:
  host: 127.0.0.1
  port: 3306
  user: repl
  password_env: REPLICAD_SOURCE_PASSWORD
  server_id: 4242
  start: latest
coordination:
  local: {path: $DEMO/position.json}
log: {format: console, level: info}
YAML
$M <<'SQL'
CREATE DATABASE IF NOT EXISTS demo;
CREATE TABLE IF NOT EXISTS demo.orders (
  id INT PRIMARY KEY AUTO_INCREMENT,
  customer VARCHAR(64) NOT NULL,
  amount DECIMAL(12,2) NOT NULL,
  status ENUM('new','paid','shipped') NOT NULL DEFAULT 'new',
  placed_at DATETIME(3) NOT NULL,
  notes JSON NULL
) DEFAULT CHARSET=utf8mb4;
SQL
echo "--- replicad run (changes on stdout, logs on stderr) ---" >&2
REPLICAD_SOURCE_PASSWORD=repl .venv/bin/replicad run -c "$DEMO/config.yaml" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true' EXIT
sleep 2
$M <<'SQL'
INSERT INTO demo.orders (customer, amount, placed_at, notes)
  VALUES ('Zoë', 12.50, NOW(3), '{"gift": true}'), ('Ana', 99.99, NOW(3), NULL);
UPDATE demo.orders SET status='paid' WHERE customer='Zoë';
DELETE FROM demo.orders WHERE customer='Ana';
SQL
sleep "${DEMO_SECONDS:-3}"
kill -TERM $pid
wait $pid
trap - EXIT
echo "--- position saved in $DEMO/position.json ---" >&2
cat "$DEMO/position.json" >&2
