#!/usr/bin/env bash
# Waits until OUR Prometheus is ready (/-/ready answers 200 on 127.0.0.1:9090). Fails with the log
# tail after PROM_WAIT_TIMEOUT seconds (default 60).
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

answers() { curl -fsS -o /dev/null --max-time 2 "$PROM_URL_DEFAULT/-/ready" 2>/dev/null; }
await_ready prometheus "$PROM_LOG_FILE" "${PROM_WAIT_TIMEOUT:-60}" prom_pid answers
echo "prometheus: ready on $PROM_URL_DEFAULT"
