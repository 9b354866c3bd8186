#!/usr/bin/env bash
# Installs Debian's Prometheus when it is missing (a fresh CI machine has none). Only the binary
# is used: the package's own system service is left stopped (start.sh runs our own process).
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if [[ -x "$PROM_BIN" ]]; then
  exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
  echo "prometheus install: $PROM_BIN missing; install it (apt-get install prometheus) as root" >&2
  exit 1
fi
echo "prometheus install: apt-get install prometheus"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# Without recommends: they would add prometheus-node-exporter, another system service.
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
[[ -x "$PROM_BIN" ]] || { echo "prometheus install: $PROM_BIN still missing" >&2; exit 1; }

# Where services may start on install, the package starts its own server on 0.0.0.0:9090, which
# would take our port: stop it (and keep it from starting at boot) rather than leave it running.
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
  systemctl disable --now prometheus >/dev/null 2>&1 || true
elif [[ -x /etc/init.d/prometheus ]] && /etc/init.d/prometheus status >/dev/null 2>&1; then
  /etc/init.d/prometheus stop >/dev/null 2>&1 || true
fi
echo "prometheus install: $("$PROM_BIN" --version 2>&1 | head -n 1)"
