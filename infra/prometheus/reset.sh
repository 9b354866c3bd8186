#!/usr/bin/env bash
# Stops Prometheus and wipes its data (the next start begins an empty TSDB).
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$PROM_INFRA_DIR/stop.sh"
rm -rf "$PROM_STATE_DIR"
echo "prometheus: data wiped"
