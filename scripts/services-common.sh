# Shared by scripts/services.sh and scripts/services-mysql.sh (sourced, never run): logging,
# apt installs, waiting, and starting and stopping the daemons this project starts itself.
# shellcheck shell=bash

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

