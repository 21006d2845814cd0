#!/usr/bin/env bash
# Installs (if missing) and starts the servers the tests need, on 127.0.0.1, idempotently.
#   scripts/services.sh up [service ...]       install + start (default: every service but
#                                              those started on request only, below)
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
#   scripts/services.sh kafka-instance up|down|kill|status <dir> <port> [controller port]
#       a private single-node Apache Kafka (KRaft); controller port default <port>+1
#   scripts/services.sh spark-jars
#       fetches the jars the Spark jobs load (scripts/spark/pom.xml: MySQL Connector/J for
#       `replicad spark verify`) from Maven Central, once per pom change, and prints their
#       directory
#   scripts/services.sh kafka-cluster up|down|kill|start|status <dir> <base port> [member ...]
#       a private 3-node Apache Kafka cluster under <dir>/kafka1..kafka3 (replication factor 3,
#       min.insync.replicas 2); member N (1-3) serves clients on base+N-1, its controller on
#       base+9+N; without members, the action is on all three; down stops them all at once
# Services: mariadb, mysql (MySQL 9.7 in a Debian sid chroot, 3307: scripts/services-mysql.sh),
# kafka (Apache Kafka 4.4 from Maven Central, KRaft, 9092 + controller
# 9093), zookeeper, redis, mosquitto; on request only: registry (Apicurio Registry 2.4 with
# its Confluent-compatible API, in memory, 8091: scripts/registry/), s3 (moto's S3 server, in
# memory, 9010, for lake tables on object storage).
# State lives under $REPLICAD_SERVICES_DIR (default: .services/ in the repo).
# A private MariaDB for a replication chain (tests/faults/test_promoted_replica.py):
# REPLICAD_MARIADB_SERVER_ID (default 1) and REPLICAD_MARIADB_LOG_SLAVE_UPDATES (default OFF;
# ON on a replica so that its binlog holds the primary's GTIDs) go into its my.cnf.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=${REPLICAD_SERVICES_DIR:-$ROOT/.services}
MARIADB_PORT=${REPLICAD_MARIADB_PORT:-3306}
MARIADB_SERVER_ID=${REPLICAD_MARIADB_SERVER_ID:-1}
MARIADB_LOG_SLAVE_UPDATES=${REPLICAD_MARIADB_LOG_SLAVE_UPDATES:-OFF}
KAFKA_PORT=${REPLICAD_KAFKA_PORT:-9092}
ZK_PORT=${REPLICAD_ZK_PORT:-2181}
REDIS_PORT=${REPLICAD_REDIS_PORT:-6390}  # not 6379: a Redis of someone else's may listen there
MQTT_PORT=${REPLICAD_MQTT_PORT:-1890}  # not 1883, likewise
REGISTRY_PORT=${REPLICAD_REGISTRY_PORT:-8091}  # not 8080/8081, the usual registry ports
S3_PORT=${REPLICAD_S3_PORT:-9010}  # not 9000, MinIO's and others'
ALL_SERVICES=(mariadb mysql kafka zookeeper redis mosquitto)
# Started only when named (`up registry`), stopped by a plain `down` too.
ON_REQUEST_SERVICES=(registry s3)

# shellcheck source=scripts/services-common.sh
. "$ROOT/scripts/services-common.sh"
# shellcheck source=scripts/services-mysql.sh
. "$ROOT/scripts/services-mysql.sh"

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
server_id=$MARIADB_SERVER_ID
log_slave_updates=$MARIADB_LOG_SLAVE_UPDATES
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

# ---------------------------------------------------------------- Apache Kafka (KRaft)
# The broker comes from Maven Central (scripts/kafka/pom.xml pins it) into $KAFKA_DIST, once
# per pom change. Every instance is a JVM started directly on kafka.Kafka: a combined broker
# and controller node (KRaft), its own directory, properties and log.
KAFKA_POM="$ROOT/scripts/kafka/pom.xml"
KAFKA_DIST="$STATE/kafka-dist"
KAFKA_COORDINATES="org.apache.kafka:kafka_2.13:4.4.0"
kafka_dir="$STATE/kafka"

kafka_fetch() { # the broker's jars, fetched again only when the pom changes
  local stamp out
  stamp="$KAFKA_DIST/.fetched-$(sha1sum "$KAFKA_POM" | cut -c1-12)"
  [ -f "$stamp" ] && return 0
  command -v java >/dev/null || apt_install openjdk-17-jre-headless
  command -v mvn >/dev/null || apt_install maven
  log "fetching $KAFKA_COORDINATES and its runtime dependencies from Maven Central"
  rm -rf "$KAFKA_DIST"; mkdir -p "$KAFKA_DIST"
  # REPLICAD_MAVEN_ARGS: options for mvn (a mirror, a proxy, -o), word-split on purpose.
  # shellcheck disable=SC2086
  if ! out=$(mvn -q -B ${REPLICAD_MAVEN_ARGS:-} -f "$KAFKA_POM" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$KAFKA_DIST/lib" 2>&1); then
    log "cannot fetch $KAFKA_COORDINATES from Maven Central: $(printf '%s\n' "$out" \
      | grep -m1 -E 'ERROR|Could not' | sed 's/^\[ERROR\] *//')"
    return 1
  fi
  cat >"$KAFKA_DIST/log4j2.properties" <<'PROPS'
# Warnings and errors, plus the lines that say a node started or stopped.
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c{1})%n
logger.server.name = kafka.server.BrokerServer
logger.server.level = INFO
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = INFO
# Markers the transaction coordinator skips (docs/operations.md, KAFKA-20734)
logger.txnmarkers.name = kafka.coordinator.transaction.TransactionMarkerChannelManager
logger.txnmarkers.level = INFO
PROPS
  touch "$stamp"
}

kafka_jvm() { # kafka_jvm <main class> [args...]: the java command line for a Kafka class
  # Serial GC and a bounded heap: the tests start up to a dozen brokers on 2 cores.
  KAFKA_JVM=(java "-Xms128m" "-Xmx${REPLICAD_KAFKA_HEAP:-768m}" -XX:+UseSerialGC
    -Djava.awt.headless=true "-Dlog4j2.configurationFile=$KAFKA_DIST/log4j2.properties"
    -cp "$KAFKA_DIST/lib/*" "$@")
}

kafka_write_props() { # kafka_write_props <dir> <node id> <port> <cport> <voters> <rf> <min isr>
  local dir=$1 id=$2 port=$3 cport=$4 voters=$5 rf=$6 isr=$7
  mkdir -p "$dir"
  cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
# replicad creates its topics itself; a deleted topic must stay deleted.
auto.create.topics.enable=false
# Internal topics with 5 partitions, not 50: the first group or transaction is quick.
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=5
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
group.initial.rebalance.delay.ms=0
log.cleaner.backoff.ms=1000
PROPS
}

kafka_format() { # kafka_format <dir>: the storage directory, once
  local dir=$1
  [ -f "$dir/data/meta.properties" ] && return 0
  kafka_jvm kafka.tools.StorageTool format -t "${KAFKA_CLUSTER_ID:-cmVwbGljYWQtdGVzdHMxMQ}" \
    -c "$dir/server.properties" --ignore-formatted
  "${KAFKA_JVM[@]}" >>"$dir/kafka.log" 2>&1 \
    || { log "kafka storage format failed; see $dir/kafka.log"; return 1; }
}

kafka_ready() { # kafka_ready <port> <brokers>: a metadata round trip lists that many brokers
  local py="$ROOT/.venv/bin/python"
  [ -x "$py" ] || { tcp_open "$1"; return; }  # not bootstrapped yet: the TCP check has to do
  "$py" - "127.0.0.1:$1" "$2" <<'PY'
import sys

from confluent_kafka.admin import AdminClient

md = AdminClient({"bootstrap.servers": sys.argv[1]}).list_topics(timeout=5)
sys.exit(0 if len(md.brokers) >= int(sys.argv[2]) else 1)
PY
}

kafka_node_start() { # kafka_node_start <dir> <port>: starts a formatted node, no wait
  local dir=$1 port=$2
  pid_alive "$dir/kafka.pid" kafka.Kafka && return 0
  rm -f "$dir/kafka.pid"
  if tcp_open "$port"; then
    log "port $port is taken by a process this script did not start"; return 1
  fi
  kafka_jvm kafka.Kafka "$dir/server.properties"
  start_daemon "$dir/kafka.pid" "$dir/kafka.log" "${KAFKA_JVM[@]}"
}

kafka_stop() { # kafka_stop <dir>...: SIGTERM to all at once, then wait (SIGKILL after 30 s)
  # All at once: a node stopped last, alone, waits for a controller quorum that is gone.
  local d pid pids=()
  for d in "$@"; do
    pid_alive "$d/kafka.pid" kafka.Kafka || { rm -f "$d/kafka.pid"; continue; }
    pid=$(cat "$d/kafka.pid"); pids+=("$pid"); kill -TERM "$pid" 2>/dev/null || true
  done
  for d in "$@"; do stop_pid "$d/kafka.pid" kafka.Kafka kafka 30 "$d/kafka.log"; done
}

kafka_wait() { # kafka_wait <dir> <port> <brokers>
  if ! wait_for 60 kafka_ready "$2" "$3" || ! pid_alive "$1/kafka.pid" kafka.Kafka; then
    log "kafka on $2 did not start; see $1/kafka.log"; tail -20 "$1/kafka.log" >&2; return 1
  fi
}

kafka_kill() { # kafka_kill <dir>: SIGKILL, as a crash would
  pid_alive "$1/kafka.pid" kafka.Kafka || return 0
  local pid; pid=$(cat "$1/kafka.pid")
  kill -KILL "$pid" 2>/dev/null || true
  wait_for 10 bash -c "! kill -0 $pid" || { log "kafka pid $pid survived SIGKILL"; return 1; }
  rm -f "$1/kafka.pid"
}

kafka_up() {
  kafka_fetch
  local cport=${REPLICAD_KAFKA_CONTROLLER_PORT:-9093}
  kafka_write_props "$kafka_dir" 1 "$KAFKA_PORT" "$cport" "1@127.0.0.1:$cport" 1 1
  if pid_alive "$kafka_dir/kafka.pid" kafka.Kafka && kafka_ready "$KAFKA_PORT" 1; then
    log "kafka already up on $KAFKA_PORT"; return 0
  fi
  kafka_format "$kafka_dir"
  kafka_node_start "$kafka_dir" "$KAFKA_PORT"
  kafka_wait "$kafka_dir" "$KAFKA_PORT" 1
  log "kafka up on 127.0.0.1:$KAFKA_PORT (KRaft, controller on $cport)"
}

kafka_down() { kafka_stop "$kafka_dir"; log "kafka down"; }

kafka_status() {
  if pid_alive "$kafka_dir/kafka.pid" kafka.Kafka && tcp_open "$KAFKA_PORT"; then
    echo "kafka: up ($KAFKA_PORT, pid $(cat "$kafka_dir/kafka.pid"))"
  else echo "kafka: down"; fi
}

kafka_instance_cmd() { # kafka-instance up|down|kill|status <dir> <port> [controller port]
  local action=${1:-} dir=${2:-} port=${3:-} usage
  usage="usage: $0 kafka-instance up|down|kill|status <dir> <port> [controller port]"
  [ -n "$dir" ] && [ -n "$port" ] || { echo "$usage" >&2; exit 2; }
  local cport=${4:-$((port + 1))}
  case "$action" in
    up)
      kafka_fetch
      kafka_write_props "$dir" 1 "$port" "$cport" "1@127.0.0.1:$cport" 1 1
      kafka_format "$dir"; kafka_node_start "$dir" "$port"; kafka_wait "$dir" "$port" 1 ;;
    down) kafka_stop "$dir" ;;
    kill) kafka_kill "$dir" ;;
    status) pid_alive "$dir/kafka.pid" kafka.Kafka && kafka_ready "$port" 1 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
}

kafka_cluster_cmd() { # kafka-cluster up|down|kill|start|status <dir> <base port> [member ...]
  local action=${1:-} dir=${2:-} base=${3:-} usage n
  usage="usage: $0 kafka-cluster up|down|kill|start|status <dir> <base port> [member ...]"
  [ -n "$dir" ] && [ -n "$base" ] || { echo "$usage" >&2; exit 2; }
  shift 3
  local members=("$@"); [ ${#members[@]} -eq 0 ] && members=(1 2 3)
  local voters="1@127.0.0.1:$((base + 10)),2@127.0.0.1:$((base + 11)),3@127.0.0.1:$((base + 12))"
  local dirs=(); for n in "${members[@]}"; do dirs+=("$dir/kafka$n"); done
  case "$action" in
    up|start)
      kafka_fetch
      for n in "${members[@]}"; do
        kafka_write_props "$dir/kafka$n" "$n" "$((base + n - 1))" "$((base + 9 + n))" "$voters" 3 2
        kafka_format "$dir/kafka$n"
        kafka_node_start "$dir/kafka$n" "$((base + n - 1))"
      done
      for n in "${members[@]}"; do kafka_wait "$dir/kafka$n" "$((base + n - 1))" 3; done ;;
    down) kafka_stop "${dirs[@]}" ;;
    kill) for n in "${members[@]}"; do kafka_kill "$dir/kafka$n"; done ;;
    status)
      for n in "${members[@]}"; do
        pid_alive "$dir/kafka$n/kafka.pid" kafka.Kafka || return 1
      done ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
}

# ---------------------------------------------------------------- Spark's jars
# Jars the Spark jobs load beside PySpark (scripts/spark/pom.xml) from Maven Central into
# $SPARK_JARS/lib, once per pom change, as the Kafka broker's above. Not a service: the test
# command fetches them (scripts/test.sh), and the tests are given the directory.
SPARK_POM="$ROOT/scripts/spark/pom.xml"
SPARK_S3_POM="$ROOT/scripts/spark/s3/pom.xml"
SPARK_JARS="$STATE/spark-jars"

spark_jars_fetch() { # the jars, fetched again only when a pom changes
  local stamp
  stamp="$SPARK_JARS/.fetched-$(cat "$SPARK_POM" "$SPARK_S3_POM" | sha1sum | cut -c1-12)"
  [ -f "$stamp" ] && return 0
  command -v java >/dev/null || apt_install openjdk-17-jre-headless
  command -v mvn >/dev/null || apt_install maven
  log "fetching the Spark jobs' jars (scripts/spark/pom.xml, s3/pom.xml) from Maven Central"
  rm -rf "$SPARK_JARS"; mkdir -p "$SPARK_JARS"
  spark_jars_copy "$SPARK_POM" "$SPARK_JARS/lib" && spark_jars_copy "$SPARK_S3_POM" "$SPARK_JARS/lib/s3" \
    || return 1
  touch "$stamp"
}

spark_jars_copy() { # spark_jars_copy <pom> <directory>: its runtime dependencies copied there
  local out
  # REPLICAD_MAVEN_ARGS: options for mvn (a mirror, a proxy, -o), word-split on purpose.
  # shellcheck disable=SC2086
  if ! out=$(mvn -q -B ${REPLICAD_MAVEN_ARGS:-} -f "$1" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$2" 2>&1); then
    # Maven 3.8 writes colour resets even in batch mode: stripped, for one clean line.
    log "cannot fetch the Spark jobs' jars ($1) from Maven Central: $(printf '%s\n' "$out" \
      | sed 's/\x1b\[[0-9;]*m//g' | grep -m1 -E 'ERROR|Could not' | sed 's/^\[ERROR\] *//')"
    return 1
  fi
}

# ---------------------------------------------------------------- schema registry
# Apicurio Registry 2.4.2 (Confluent-compatible API under /apis/ccompat/v7, in-memory H2
# storage: every start is empty), built once per change of scripts/registry/ into
# $REGISTRY_DIST: Maven Central serves its app module only as a plain jar, so `mvn package`
# runs Quarkus's build over it (~40 s with a warm ~/.m2). Not in the
# default `up`: only the Avro tests need it (its JVM is up in ~4 s, ~160 MB resident).
REGISTRY_SRC="$ROOT/scripts/registry"
REGISTRY_DIST="$STATE/registry-dist"
REGISTRY_JAR="$REGISTRY_DIST/build/apicurio-registry-replicad-1-runner.jar"
registry_dir="$STATE/registry"

registry_fetch() { # the runnable registry, built again only when scripts/registry/ changes
  local stamp out
  stamp="$REGISTRY_DIST/.built-$(find "$REGISTRY_SRC" -type f -not -path '*/target/*' -print0 \
    | sort -z | xargs -0 sha1sum | sha1sum | cut -c1-12)"
  [ -f "$stamp" ] && [ -f "$REGISTRY_JAR" ] && return 0
  # A JDK, not a JRE: scripts/registry/src has one class to compile.
  command -v javac >/dev/null || apt_install openjdk-17-jdk-headless
  command -v mvn >/dev/null || apt_install maven
  log "building Apicurio Registry 2.4.2.Final (scripts/registry/pom.xml) from Maven Central"
  rm -rf "$REGISTRY_DIST"; mkdir -p "$REGISTRY_DIST"
  # REPLICAD_MAVEN_ARGS: options for mvn (a mirror, a proxy, -o), word-split on purpose.
  # shellcheck disable=SC2086
  if ! out=$(mvn -q -B ${REPLICAD_MAVEN_ARGS:-} -f "$REGISTRY_SRC/pom.xml" package \
      -Dregistry.build.dir="$REGISTRY_DIST/build" 2>&1) || [ ! -f "$REGISTRY_JAR" ]; then
    log "cannot build the schema registry from Maven Central: $(printf '%s\n' "$out" \
      | sed 's/\x1b\[[0-9;]*m//g' | grep -m1 -E 'ERROR|Could not' | sed 's/^\[ERROR\] *//')"
    return 1
  fi
  touch "$stamp"
}

registry_ready() { # the Confluent-compatible API answers
  curl -sf "http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7/subjects" >/dev/null
}

registry_up() {
  registry_fetch
  mkdir -p "$registry_dir"
  if pid_alive "$registry_dir/registry.pid" apicurio-registry-replicad && registry_ready; then
    log "registry already up on $REGISTRY_PORT"; return 0
  fi
  rm -f "$registry_dir/registry.pid"
  if tcp_open "$REGISTRY_PORT"; then
    log "port $REGISTRY_PORT is taken by a process this script did not start"; return 1
  fi
  start_daemon "$registry_dir/registry.pid" "$registry_dir/registry.log" java -Xms64m \
    -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dquarkus.http.host=127.0.0.1 "-Dquarkus.http.port=$REGISTRY_PORT" \
    -Dquarkus.log.level=WARN -jar "$REGISTRY_JAR"
  if ! wait_for 60 registry_ready || ! pid_alive "$registry_dir/registry.pid" apicurio-registry-replicad; then
    log "registry on $REGISTRY_PORT did not start; see $registry_dir/registry.log"
    tail -20 "$registry_dir/registry.log" >&2; return 1
  fi
  log "registry up on http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7 (Apicurio, in memory)"
}

registry_down() {
  stop_pid "$registry_dir/registry.pid" apicurio-registry-replicad registry 20 "$registry_dir/registry.log"
  log "registry down"
}

registry_status() {
  if pid_alive "$registry_dir/registry.pid" apicurio-registry-replicad && registry_ready; then
    echo "registry: up ($REGISTRY_PORT, pid $(cat "$registry_dir/registry.pid"))"
  else echo "registry: down"; fi
}

# ---------------------------------------------------------------- S3 (moto)
# moto's standalone server speaks the S3 API on 127.0.0.1:$S3_PORT, in memory (every start is
# empty; any access key is accepted). It lives in its own venv under $STATE (installed from
# PyPI once per version), apart from the project's: the tests talk to it over HTTP only.
MOTO_VERSION=5.2.5
s3_dir="$STATE/s3"
s3_venv="$STATE/moto-$MOTO_VERSION"

s3_fetch() {
  [ -x "$s3_venv/bin/moto_server" ] && return 0
  log "installing moto[server]==$MOTO_VERSION from PyPI into $s3_venv"
  rm -rf "$s3_venv"
  local out
  if ! out=$(python3 -m venv "$s3_venv" 2>&1 \
      && "$s3_venv/bin/pip" install -q "moto[server]==$MOTO_VERSION" 2>&1); then
    log "cannot install moto[server]: $(printf '%s\n' "$out" | grep -m1 -E 'ERROR|rror')"
    rm -rf "$s3_venv"; return 1
  fi
}

s3_ready() { curl -fsS -o /dev/null "http://127.0.0.1:$S3_PORT/moto-api/"; }

s3_up() {
  s3_fetch
  mkdir -p "$s3_dir"
  if pid_alive "$s3_dir/s3.pid" moto_server && s3_ready; then
    log "s3 already up on $S3_PORT"; return 0
  fi
  rm -f "$s3_dir/s3.pid"
  if tcp_open "$S3_PORT"; then
    log "port $S3_PORT is taken by a process this script did not start"; return 1
  fi
  start_daemon "$s3_dir/s3.pid" "$s3_dir/s3.log" "$s3_venv/bin/python" \
    "$s3_venv/bin/moto_server" -H 127.0.0.1 -p "$S3_PORT"
  if ! wait_for 30 s3_ready || ! pid_alive "$s3_dir/s3.pid" moto_server; then
    log "s3 on $S3_PORT did not start; see $s3_dir/s3.log"; tail -20 "$s3_dir/s3.log" >&2
    return 1
  fi
  log "s3 up on http://127.0.0.1:$S3_PORT (moto $MOTO_VERSION, in memory)"
}

s3_down() {
  stop_pid "$s3_dir/s3.pid" moto_server s3 10 "$s3_dir/s3.log"
  log "s3 down"
}

s3_status() {
  if pid_alive "$s3_dir/s3.pid" moto_server && s3_ready; then
    echo "s3: up ($S3_PORT, pid $(cat "$s3_dir/s3.pid"))"
  else echo "s3: down"; fi
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
  kafka-instance) shift; kafka_instance_cmd "$@"; exit 0 ;;
  spark-jars) spark_jars_fetch; echo "$SPARK_JARS/lib"; exit 0 ;;
  kafka-cluster) shift; kafka_cluster_cmd "$@"; exit 0 ;;
  zk-ensemble) shift; zk_ensemble_cmd "$@"; exit 0 ;;
  zk-sasl) shift; zk_sasl_cmd "$@"; exit 0 ;;
  redis-instance) shift; redis_instance_cmd "$@"; exit 0 ;;
  mosquitto-instance) shift; mosquitto_instance_cmd "$@"; exit 0 ;;
esac
cmd=${1:-up}; shift || true
KNOWN_SERVICES=("${ALL_SERVICES[@]}" "${ON_REQUEST_SERVICES[@]}")
wanted=" $* "; [ $# -eq 0 ] && wanted=" ${ALL_SERVICES[*]} "
[ $# -eq 0 ] && [ "$cmd" != up ] && wanted=" ${KNOWN_SERVICES[*]} "
for svc in "$@"; do
  case " ${KNOWN_SERVICES[*]} " in
    *" $svc "*) ;;
    *) echo "unknown service: $svc (known: ${KNOWN_SERVICES[*]})" >&2; exit 2 ;;
  esac
done
# In KNOWN_SERVICES order, whatever the order asked; `down` in reverse.
services=()
for svc in "${KNOWN_SERVICES[@]}"; do
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
