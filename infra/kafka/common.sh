# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this
# Sourced by the infra/kafka scripts: one place for paths and defaults, so every script agrees on
# where the jars, the data and the PID file are, whatever the caller's cwd.
KAFKA_INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../process.sh
source "$KAFKA_INFRA_DIR/../process.sh"
GFS_REPO_DIR="$(cd "$KAFKA_INFRA_DIR/../.." && pwd)"
GFS_STACK_DIR="${GFS_STACK_DIR:-$GFS_REPO_DIR/.stack}"
KAFKA_LIB_DIR="$KAFKA_INFRA_DIR/lib"
KAFKA_STATE_DIR="$GFS_STACK_DIR/kafka"      # git-ignored: data, logs, rendered config, PID file
KAFKA_DATA_DIR="$KAFKA_STATE_DIR/data"
KAFKA_LOG_DIR="$KAFKA_STATE_DIR/logs"
KAFKA_PID_FILE="$KAFKA_STATE_DIR/kafka.pid"
KAFKA_CONFIG="$KAFKA_STATE_DIR/server.properties"
KAFKA_DEFAULT_BOOTSTRAP="127.0.0.1:9092"
KAFKA_BOOTSTRAP="${KAFKA_BOOTSTRAP_SERVERS:-$KAFKA_DEFAULT_BOOTSTRAP}"

# Prints the broker's PID when the PID file names a live JVM running kafka.Kafka; fails otherwise.
# Checking the command line guards against a stale PID file whose number was reused.
kafka_broker_pid() {
  [[ -f "$KAFKA_PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$KAFKA_PID_FILE")"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'kafka\.Kafka' || return 1
  echo "$pid"
}

# Passes --bootstrap-server only when the caller did not, so wrappers stay transparent.
kafka_bootstrap_args() {
  local a
  for a in "$@"; do
    [[ "$a" == --bootstrap-server* ]] && return 0
  done
  printf '%s\n' --bootstrap-server "$KAFKA_BOOTSTRAP"
}
