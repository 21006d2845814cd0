# The `mysql` service: real Oracle MySQL 9.7 from Debian sid, in a debootstrap chroot under
# $STATE/mysql/root (Debian 12 has no Oracle MySQL, and sid's needs a newer libc than the
# host's). Sourced by scripts/services.sh after scripts/services-common.sh (log, apt_install,
# wait_for, tcp_open, pid_alive, start_daemon, stop_pid; ROOT, STATE); defines mysql_up,
# mysql_down and mysql_status.
#
# No mount is ever made in the host's mount namespace: a CI harness that walks or removes the
# clone must never reach the host's /dev or /proc through .services. Whatever needs /proc or
# /dev (debootstrap's second stage, apt and dpkg scripts, mysqld) runs inside a private mount
# namespace (`unshare --mount`), whose mounts vanish with its last process. Check with
# `findmnt | grep .services` (empty at all times).
# shellcheck shell=bash

MYSQL_PORT=${REPLICAD_MYSQL_PORT:-3307}
MYSQL_MIRROR=${REPLICAD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mysql_dir="$STATE/mysql"
mysql_root="$mysql_dir/root"
mysql_pidfile="$mysql_dir/mysqld.pid"   # the pid start_daemon recorded: mysqld's own
mysql_stamp="$mysql_dir/.installed-1"  # bump the number when the install recipe changes
# Paths as mysqld sees them, inside the root (on the host: $mysql_root$MYSQL_HOME/...).
MYSQL_HOME=/srv/replicad
MYSQL_CNF=/etc/mysql/replicad.cnf

mysql_fail() { # mysql_fail <one-line reason> [log]: the reason, then the log's tail
  log "mysql: $1${2:+ (see $2)}"
  if [ -n "${2:-}" ] && [ -f "$2" ]; then tail -n 20 "$2" >&2; fi
  return 0  # the caller returns 1 (under set -e a failing call would end the script here)
}

mysql_mounts() { # the mount points under $mysql_dir in this (the host's) namespace
  findmnt -rn -o TARGET | awk -v d="$mysql_dir/" 'index($0 "/", d) == 1'
}

# `sh -c` script: mount /proc and /dev in the root given as $1, then exec the rest in it.
# unshare, sh and chroot all exec in place, so the pid that starts it is the command's own,
# and the namespace (with its mounts) ends when the command does.
MYSQL_NS_SCRIPT='r=$1; shift
mount -t proc proc "$r/proc" && mount --rbind /dev "$r/dev" || exit 125
exec chroot "$r" "$@"'

mysql_in_root() { # mysql_in_root <command...>: run in the root with /proc and /dev, privately
  unshare --mount --propagation private -- sh -c "$MYSQL_NS_SCRIPT" sh "$mysql_root" "$@"
}

mysql_bootstrap() { # a fresh Debian sid minbase root with MySQL's packages
  local ilog="$mysql_dir/install.log"
  apt_install debootstrap || { mysql_fail "cannot install debootstrap with apt-get"; return 1; }
  if [ -n "$(mysql_mounts)" ]; then
    # Removing the old root would recurse into whatever is mounted there.
    mysql_fail "mounts under $mysql_dir in the host namespace, unmount them first: $(mysql_mounts | tr '\n' ' ')"
    return 1
  fi
  rm -rf --one-file-system "$mysql_root"; mkdir -p "$mysql_root"; : >"$ilog"
  log "installing MySQL 9.7 from Debian sid into $mysql_root (about a minute)"
  # debootstrap mounts proc and sys in the target for its second stage: privately too.
  unshare --mount --propagation private -- \
    debootstrap --variant=minbase sid "$mysql_root" "$MYSQL_MIRROR" >>"$ilog" 2>&1 \
    || { mysql_fail "debootstrap of Debian sid from $MYSQL_MIRROR failed" "$ilog"; return 1; }
  # Packages start nothing; sid's Release file may be served past its Valid-Until.
  printf '#!/bin/sh\nexit 101\n' >"$mysql_root/usr/sbin/policy-rc.d"
  chmod 755 "$mysql_root/usr/sbin/policy-rc.d"
  printf 'Acquire::Check-Valid-Until "false";\nAPT::Install-Recommends "false";\n' \
    >"$mysql_root/etc/apt/apt.conf.d/99replicad"
  { mysql_in_root apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive mysql_in_root apt-get install -y -q \
      mysql-server-core mysql-client; } >>"$ilog" 2>&1 \
    || { mysql_fail "apt-get install mysql-server-core mysql-client in the sid root failed" "$ilog"; return 1; }
  # mysql-server-core creates no user to run the server as.
  mysql_in_root sh -c 'getent passwd mysql >/dev/null || useradd --system --user-group \
    --home-dir /nonexistent --shell /usr/sbin/nologin mysql' >>"$ilog" 2>&1 \
    || { mysql_fail "cannot create the mysql user in the root" "$ilog"; return 1; }
  touch "$mysql_stamp"
}

mysql_strip_devices() { # the device nodes and /proc links debootstrap made in the root's /dev
  # Everything runs with the host's /dev bound over it (mysql_in_root), so they are never
  # used; left in the clone, a tool copying or hashing the tree would read /dev/zero or
  # /dev/random there for ever, or follow dev/fd into /proc.
  find "$mysql_root/dev" -mindepth 1 -maxdepth 1 ! -type d -exec rm -f {} + 2>/dev/null || true
}

mysql_write_cnf() {
  mkdir -p "$mysql_root$MYSQL_HOME"/{tmp,files}
  cat >"$mysql_root$MYSQL_CNF" <<EOF
[client]
socket=$MYSQL_HOME/mysqld.sock
user=root
password=root

[mysqld]
user=mysql
datadir=$MYSQL_HOME/data
tmpdir=$MYSQL_HOME/tmp
socket=$MYSQL_HOME/mysqld.sock
pid-file=$MYSQL_HOME/mysqld.pid
log-error=$MYSQL_HOME/error.log
secure-file-priv=$MYSQL_HOME/files
port=$MYSQL_PORT
bind-address=127.0.0.1
mysqlx=OFF
skip-name-resolve
server-id=1
log-bin=$MYSQL_HOME/data/binlog
binlog_format=ROW
binlog_row_image=FULL
binlog_row_metadata=FULL
gtid_mode=ON
enforce_gtid_consistency=ON
# caching_sha2_password is the default (authentication_policy *,,; 8.4 removed
# default_authentication_plugin); binlog_format is deprecated, ROW is its default.
character_set_server=utf8mb4
max_allowed_packet=256M
# Small: the tests run beside MariaDB, Kafka and ZooKeeper on 2 cores.
innodb_buffer_pool_size=64M
innodb_redo_log_capacity=64M
performance_schema=OFF
EOF
  # mysqld runs as mysql and writes its socket, logs and pid there. chown inside the root: the
  # host's own mysql user (MariaDB's) has another uid.
  chroot "$mysql_root" chown mysql:mysql "$MYSQL_HOME" "$MYSQL_HOME/tmp" "$MYSQL_HOME/files"
}

mysql_client() { # mysql_client <mysql|mysqladmin> [args...]: root over the root's socket
  mysql_in_root "$1" --defaults-file="$MYSQL_CNF" "${@:2}"
}

mysql_ping() { # the server answers (mysqladmin ping succeeds even on a refused login)
  pid_alive "$mysql_pidfile" mysqld && mysql_client mysqladmin --connect-timeout=2 ping
}

mysql_initialize() { # a fresh datadir (root without password until mysql_users): 0, 1 if
  # the datadir is ready, 2 on failure. A datadir whose users were never made is made again.
  [ -f "$mysql_dir/.datadir-ready" ] && [ -d "$mysql_root$MYSQL_HOME/data/mysql" ] && return 1
  rm -rf "$mysql_root$MYSQL_HOME/data" "$mysql_dir/.datadir-ready"
  log "initialising the mysql datadir"
  mysql_in_root mysqld --defaults-file="$MYSQL_CNF" --initialize-insecure \
    >>"$mysql_dir/install.log" 2>&1 \
    || { mysql_fail "mysqld --initialize-insecure failed" "$mysql_root$MYSQL_HOME/error.log"; return 2; }
}

mysql_users() { # root/root (socket and 127.0.0.1) and repl/repl, on a fresh server
  mysql_in_root mysql --no-defaults --socket="$MYSQL_HOME/mysqld.sock" -uroot <<'SQL'
ALTER USER 'root'@'localhost' IDENTIFIED BY 'root';
CREATE USER 'root'@'127.0.0.1' IDENTIFIED BY 'root';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY 'repl';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'repl'@'127.0.0.1';
SQL
}

mysql_up() {
  if [ -f "$mysql_stamp" ] && mysql_ping >/dev/null 2>&1; then
    log "mysql already up on 127.0.0.1:$MYSQL_PORT"; return 0
  fi
  [ -f "$mysql_stamp" ] || mysql_bootstrap || return 1
  mysql_strip_devices
  mysql_write_cnf
  if tcp_open "$MYSQL_PORT"; then
    mysql_fail "port $MYSQL_PORT is taken by a process this script did not start"; return 1
  fi
  local fresh=0 rc=0
  mysql_initialize || rc=$?
  case $rc in 0) fresh=1 ;; 1) ;; *) return 1 ;; esac
  rm -f "$mysql_pidfile"
  start_daemon "$mysql_pidfile" "$mysql_dir/mysqld.log" \
    unshare --mount --propagation private -- sh -c "$MYSQL_NS_SCRIPT" sh "$mysql_root" \
    /usr/sbin/mysqld --defaults-file="$MYSQL_CNF"
  if ! wait_for 60 mysql_ping; then
    mysql_fail "mysqld did not start on 127.0.0.1:$MYSQL_PORT" "$mysql_root$MYSQL_HOME/error.log"
    return 1
  fi
  if [ "$fresh" = 1 ]; then
    mysql_users >>"$mysql_dir/install.log" 2>&1 \
      || { mysql_fail "creating the root and repl users failed" "$mysql_dir/install.log"; return 1; }
    touch "$mysql_dir/.datadir-ready"
  fi
  log "mysql up on 127.0.0.1:$MYSQL_PORT ($(mysql_client mysql -N -e 'SELECT @@version_comment, @@version' \
    2>/dev/null | tr '\t' ' '), root/root, repl/repl)"
}

mysql_down() {
  if ! pid_alive "$mysql_pidfile" mysqld; then rm -f "$mysql_pidfile"; log "mysql down"; return 0; fi
  local pid; pid=$(cat "$mysql_pidfile")
  # shutdown returns before the process exits: wait for the pid, SIGTERM if it did not take.
  mysql_client mysqladmin shutdown >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
  wait_for 60 bash -c "! kill -0 $pid" || stop_pid "$mysql_pidfile" mysqld mysql 10
  rm -f "$mysql_pidfile"
  log "mysql down"
}

mysql_status() {
  if mysql_ping >/dev/null 2>&1; then
    echo "mysql: up ($MYSQL_PORT, pid $(cat "$mysql_pidfile"))"
  else echo "mysql: down"; fi
}
