#!/usr/bin/env bash
# Stops the cluster and deletes it; the next start runs initdb again.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$PG_INFRA_DIR/stop.sh"
rm -rf "$PG_STATE_DIR"
echo "postgres: data wiped"
