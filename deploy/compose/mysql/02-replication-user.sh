#!/bin/bash
# Sourced by the mysql image's entrypoint on the first start, after 01-schema.sql, while the
# server still listens on its socket only. Creates the user replicad reads the binlog as
# (its password from REPLICATION_PASSWORD, deploy/compose/env/replication.env) and the signal
# table of incremental snapshots (docs/snapshots.md), which `snapshot.mode: initial` uses on
# MySQL. No `set -e`: this file is sourced, and the entrypoint already runs under it.
if [ -z "${REPLICATION_PASSWORD:-}" ]; then
  echo "02-replication-user.sh: REPLICATION_PASSWORD is not set" >&2
  exit 1
fi
mysql --protocol=socket -uroot --password="$MYSQL_ROOT_PASSWORD" <<SQL
CREATE USER IF NOT EXISTS 'replicad'@'%' IDENTIFIED BY '${REPLICATION_PASSWORD}';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'replicad'@'%';
CREATE DATABASE IF NOT EXISTS replicad;
CREATE TABLE IF NOT EXISTS replicad.replicad_signal (
  id VARCHAR(128) NOT NULL PRIMARY KEY,
  kind VARCHAR(16) NOT NULL,
  window_id VARCHAR(64) NOT NULL,
  at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB;
GRANT INSERT, UPDATE, DELETE ON replicad.replicad_signal TO 'replicad'@'%';
SQL
