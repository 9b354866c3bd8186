#!/usr/bin/env bash
# Stops the broker named by the PID file: SIGTERM for a clean shutdown (it flushes and closes the
# KRaft log), then SIGKILL after KAFKA_STOP_TIMEOUT seconds (default 30). No-op when not running.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if ! pid="$(kafka_broker_pid)"; then
  rm -f "$KAFKA_PID_FILE"
  echo "kafka: not running"
  exit 0
fi
stop_pid kafka "$pid" "${KAFKA_STOP_TIMEOUT:-30}"
rm -f "$KAFKA_PID_FILE"
echo "kafka: stopped"
