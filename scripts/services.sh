#!/usr/bin/env bash
# Installs (if missing) and starts the servers the tests need, on 127.0.0.1, idempotently.
#   scripts/services.sh up [mariadb ...]     install + start (default: every service)
#   scripts/services.sh down [mariadb ...]   stop what this script started
#   scripts/services.sh status
# State lives under $REPLICAD_SERVICES_DIR (default: .services/ in the repo).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=${REPLICAD_SERVICES_DIR:-$ROOT/.services}
MARIADB_PORT=${REPLICAD_MARIADB_PORT:-3306}
ALL_SERVICES=(mariadb)

log() { printf '[services] %s\n' "$*" >&2; }

apt_updated=0
apt_install() {
  # Only touch apt when a package is really missing: fast on a prepared machine.
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$apt_updated" = 0 ]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

wait_for() { # wait_for <deadline seconds> <command...>
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then return 1; fi
    sleep 0.2
  done
}

# ---------------------------------------------------------------- MariaDB
mariadb_dir="$STATE/mariadb"
mariadb_cnf="$mariadb_dir/my.cnf"

mariadb_tls() { # a private CA and a server certificate for localhost/127.0.0.1, made once
  local d="$mariadb_dir/ssl"
  [ -f "$d/server-cert.pem" ] && return 0
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=replicad test CA" \
    -keyout "$d/ca-key.pem" -out "$d/ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$d/server-key.pem" -out "$d/server.csr" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
    >"$d/ext.cnf"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca-key.pem" -CAcreateserial \
    -days 3650 -extfile "$d/ext.cnf" -out "$d/server-cert.pem" 2>/dev/null
}

mariadb_write_cnf() {
  mkdir -p "$mariadb_dir/data" "$mariadb_dir/tmp"
  cat >"$mariadb_cnf" <<EOF
[client]
host=127.0.0.1
port=$MARIADB_PORT
user=root
password=root

[mariadbd]
user=root
datadir=$mariadb_dir/data
tmpdir=$mariadb_dir/tmp
socket=$mariadb_dir/mariadb.sock
pid-file=$mariadb_dir/mariadb.pid
log-error=$mariadb_dir/error.log
port=$MARIADB_PORT
bind-address=127.0.0.1
skip-name-resolve
server_id=1
log_bin=$mariadb_dir/data/mariadb-bin
binlog_format=ROW
binlog_row_image=FULL
binlog_row_metadata=FULL
binlog_checksum=CRC32
gtid_strict_mode=1
innodb_buffer_pool_size=64M
innodb_log_file_size=64M
performance_schema=OFF
plugin_load_add=auth_ed25519
max_allowed_packet=256M
character_set_server=utf8mb4
collation_server=utf8mb4_general_ci
sql_mode=ONLY_FULL_GROUP_BY,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION
ssl_ca=$mariadb_dir/ssl/ca.pem
ssl_cert=$mariadb_dir/ssl/server-cert.pem
ssl_key=$mariadb_dir/ssl/server-key.pem
EOF
}

mariadb_ping() { mariadb-admin --defaults-file="$mariadb_cnf" ping; }

mariadb_up() {
  apt_install mariadb-server mariadb-client openssl
  mariadb_write_cnf
  mariadb_tls
  if mariadb_ping >/dev/null 2>&1; then log "mariadb already up on $MARIADB_PORT"; return 0; fi
  if [ ! -d "$mariadb_dir/data/mysql" ]; then
    log "initialising mariadb datadir"
    mariadb-install-db --defaults-file="$mariadb_cnf" --skip-test-db \
      --auth-root-authentication-method=normal >"$mariadb_dir/install.log" 2>&1
    local fresh=1
  fi
  setsid nohup /usr/sbin/mariadbd --defaults-file="$mariadb_cnf" >>"$mariadb_dir/stdout.log" 2>&1 < /dev/null &
  # The root password is set on first start; until then ping as root without password.
  if ! wait_for 30 mariadb-admin --no-defaults --socket="$mariadb_dir/mariadb.sock" -uroot ping \
     && ! wait_for 1 mariadb_ping; then
    log "mariadb did not start; see $mariadb_dir/error.log"; tail -20 "$mariadb_dir/error.log" >&2; return 1
  fi
  if [ "${fresh:-0}" = 1 ]; then
    mariadb --no-defaults --socket="$mariadb_dir/mariadb.sock" -uroot <<'SQL'
ALTER USER 'root'@'localhost' IDENTIFIED BY 'root';
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
ALTER USER 'root'@'127.0.0.1' IDENTIFIED BY 'root';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS 'repl'@'127.0.0.1' IDENTIFIED VIA mysql_native_password USING PASSWORD('repl');
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'repl'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL
  fi
  wait_for 30 mariadb_ping || { log "mariadb not reachable on 127.0.0.1:$MARIADB_PORT"; return 1; }
  log "mariadb up on 127.0.0.1:$MARIADB_PORT (root/root, repl/repl)"
}

mariadb_down() {
  [ -f "$mariadb_dir/mariadb.pid" ] || return 0
  local pid; pid=$(cat "$mariadb_dir/mariadb.pid" 2>/dev/null || true)
  mariadb-admin --defaults-file="$mariadb_cnf" shutdown >/dev/null 2>&1 || true
  # shutdown returns before the process exits: wait for the pid to go.
  [ -n "$pid" ] && wait_for 30 bash -c "! kill -0 $pid" || true
  log "mariadb down"
}

mariadb_status() { if mariadb_ping >/dev/null 2>&1; then echo "mariadb: up ($MARIADB_PORT)"; else echo "mariadb: down"; fi; }

# ---------------------------------------------------------------- main
cmd=${1:-up}; shift || true
services=("$@"); [ ${#services[@]} -eq 0 ] && services=("${ALL_SERVICES[@]}")
mkdir -p "$STATE"
for svc in "${services[@]}"; do
  case "$cmd" in
    up) "${svc}_up" ;;
    down) "${svc}_down" ;;
    status) "${svc}_status" ;;
    *) echo "usage: $0 up|down|status [service...]" >&2; exit 2 ;;
  esac
done
