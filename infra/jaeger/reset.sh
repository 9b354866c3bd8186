#!/usr/bin/env bash
# Stops Jaeger and removes its log and PID file (its traces live in memory, so the stop alone
# forgets them). The built binary in .stack/bin is kept.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$JAEGER_INFRA_DIR/stop.sh"
rm -rf "$JAEGER_STATE_DIR"
echo "jaeger: data wiped"
