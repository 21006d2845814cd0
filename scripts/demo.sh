#!/usr/bin/env bash
# The main job on a fresh machine: start the local demo primary, write demo changes, and show
# replicad decoding them from the primary's binary log as change events (JSON lines).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/bootstrap.sh
bash scripts/services.sh up mariadb
M="mariadb --defaults-file=.services/mariadb/my.cnf"
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
FLUSH BINARY LOGS;
INSERT INTO demo.orders (customer, amount, placed_at, notes)
  VALUES ('Zoë', 12.50, NOW(3), '{"gift": true}'), ('Ana', 99.99, NOW(3), NULL);
UPDATE demo.orders SET status='paid' WHERE customer='Zoë';
DELETE FROM demo.orders WHERE customer='Ana';
SQL
last=$($M -N -e "SHOW BINARY LOGS" | tail -1 | cut -f1)
.venv/bin/replicad dump ".services/mariadb/data/$last"
