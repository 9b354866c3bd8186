#!/usr/bin/env bash
# Waits until OUR Prometheus is ready (/-/ready answers 200 on 127.0.0.1:9090). Fails with the log
# tail after PROM_WAIT_TIMEOUT seconds (default 60).
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

timeout_s="${PROM_WAIT_TIMEOUT:-60}"
deadline=$((SECONDS + timeout_s))

fail() {
  echo "prometheus: $1" >&2
  echo "---- tail of $PROM_LOG_FILE ----" >&2
  tail -n 30 "$PROM_LOG_FILE" 2>/dev/null >&2 || true
  exit 1
}

while ((SECONDS < deadline)); do
  prom_pid >/dev/null || fail "the prometheus process is not running"
  if curl -fsS -o /dev/null --max-time 2 "$PROM_URL_DEFAULT/-/ready" 2>/dev/null; then
    echo "prometheus: ready on $PROM_URL_DEFAULT"
    exit 0
  fi
  sleep 0.5
done
fail "not ready after ${timeout_s}s"
