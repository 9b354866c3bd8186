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
stop_pid jaeger "$pid" "${JAEGER_STOP_TIMEOUT:-20}"
rm -f "$JAEGER_PID_FILE"
echo "jaeger: stopped"
