#!/usr/bin/env bash
# Stops Jaeger: SIGTERM (it shuts its receivers and servers down), SIGKILL after
# JAEGER_STOP_TIMEOUT seconds (default 20). No-op when not running. Its traces are in memory:
# a stop forgets them.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if ! pid="$(jaeger_pid)"; then
  rm -f "$JAEGER_PID_FILE"
  echo "jaeger: not running"
  exit 0
fi
kill -TERM "$pid"
for ((i = 0; i < ${JAEGER_STOP_TIMEOUT:-20}; i++)); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 1
done
if kill -0 "$pid" 2>/dev/null; then
  echo "jaeger: pid $pid ignored SIGTERM, killing" >&2
  kill -KILL "$pid" 2>/dev/null || true
fi
rm -f "$JAEGER_PID_FILE"
echo "jaeger: stopped"
