#!/usr/bin/env bash
# Stops the broker and wipes its data, logs and config (the next start formats a fresh cluster).
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$KAFKA_INFRA_DIR/stop.sh"
rm -rf "$KAFKA_STATE_DIR"
echo "kafka: data wiped"
