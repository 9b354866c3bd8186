#!/usr/bin/env bash
# Stops the cluster (fast mode: roll back open transactions, no waiting for clients). No-op if down.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if pg_running; then
  pg_as_owner "$(pg_bin_dir)/pg_ctl" -D "$PG_DATA_DIR" -m fast -w -t 60 stop >/dev/null
  echo "postgres: stopped"
else
  echo "postgres: not running"
fi
