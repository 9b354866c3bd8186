# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this
# Sourced by the infra/prometheus scripts: paths of Debian's Prometheus run as our own process
# (not the package's system service), with this folder's prometheus.yml.
PROM_INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../process.sh
source "$PROM_INFRA_DIR/../process.sh"
GFS_REPO_DIR="$(cd "$PROM_INFRA_DIR/../.." && pwd)"
GFS_STACK_DIR="${GFS_STACK_DIR:-$GFS_REPO_DIR/.stack}"
PROM_BIN=/usr/bin/prometheus
PROM_CONFIG="$PROM_INFRA_DIR/prometheus.yml"
PROM_STATE_DIR="$GFS_STACK_DIR/prometheus"   # git-ignored: TSDB, log, PID file
PROM_DATA_DIR="$PROM_STATE_DIR/data"
PROM_LOG_FILE="$PROM_STATE_DIR/prometheus.log"
PROM_PID_FILE="$PROM_STATE_DIR/prometheus.pid"
PROM_LISTEN=127.0.0.1:9090
PROM_URL_DEFAULT="http://$PROM_LISTEN"

# Prints the PID when the PID file names a live Prometheus reading our config; fails otherwise
# (guards against a stale PID file whose number was reused).
prom_pid() {
  [[ -f "$PROM_PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PROM_PID_FILE")"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "--config.file=$PROM_CONFIG" || return 1
  echo "$pid"
}
