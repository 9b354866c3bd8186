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
kill -TERM "$pid"
for ((i = 0; i < ${PROM_STOP_TIMEOUT:-30}; i++)); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 1
done
if kill -0 "$pid" 2>/dev/null; then
  echo "prometheus: pid $pid ignored SIGTERM, killing" >&2
  kill -KILL "$pid" 2>/dev/null || true
fi
rm -f "$PROM_PID_FILE"
echo "prometheus: stopped"
