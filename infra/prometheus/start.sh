#!/usr/bin/env bash
# Starts Prometheus on 127.0.0.1:9090 with infra/prometheus/prometheus.yml (scrapes the services'
# /metrics every 5 s), data in .stack/prometheus/data. Idempotent: installs only when missing,
# no-op when it runs.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$PROM_INFRA_DIR/install.sh"
if pid="$(prom_pid)"; then
  echo "prometheus: already running (pid $pid)"
  exit 0
fi
if (exec 3<>"/dev/tcp/${PROM_LISTEN%%:*}/${PROM_LISTEN##*:}") 2>/dev/null; then
  echo "prometheus: $PROM_LISTEN is already taken by a process this checkout did not start" >&2
  exit 1
fi
# A config error should fail here, loudly, rather than as a process that dies in the background.
promtool_bin="$(command -v promtool || true)"
if [[ -n "$promtool_bin" ]] && ! "$promtool_bin" check config "$PROM_CONFIG" >/dev/null; then
  "$promtool_bin" check config "$PROM_CONFIG" >&2 || true
  exit 1
fi
mkdir -p "$PROM_DATA_DIR"
if [[ -f "$PROM_LOG_FILE" ]]; then
  mv "$PROM_LOG_FILE" "$PROM_LOG_FILE.prev"
fi
# --web.enable-lifecycle: `curl -X POST $PROM_URL_DEFAULT/-/reload` re-reads prometheus.yml.
# 2 days of retention is plenty for a development stack.
setsid nohup "$PROM_BIN" \
  --config.file="$PROM_CONFIG" \
  --storage.tsdb.path="$PROM_DATA_DIR" \
  --storage.tsdb.retention.time=2d \
  --web.listen-address="$PROM_LISTEN" \
  --web.enable-lifecycle \
  </dev/null >"$PROM_LOG_FILE" 2>&1 &
echo $! >"$PROM_PID_FILE"
await_exec "$!" "$PROM_BIN " || true # wait.sh reports a Prometheus that died at once
echo "prometheus: started (pid $!), log $PROM_LOG_FILE"
