#!/usr/bin/env bash
# Stops Prometheus: SIGTERM (it closes the TSDB cleanly), SIGKILL after PROM_STOP_TIMEOUT seconds
# (default 30). No-op when not running; the data stays in .stack/prometheus/data.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if ! pid="$(prom_pid)"; then
  rm -f "$PROM_PID_FILE"
  echo "prometheus: not running"
  exit 0
fi
stop_pid prometheus "$pid" "${PROM_STOP_TIMEOUT:-30}"
rm -f "$PROM_PID_FILE"
echo "prometheus: stopped"
