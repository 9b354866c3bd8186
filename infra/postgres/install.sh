#!/usr/bin/env bash
# Installs Debian's PostgreSQL server when its binaries are missing (a fresh CI machine has none).
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if bin="$(pg_bin_dir)"; then
  exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
  echo "postgres install: no server under /usr/lib/postgresql; install it (apt-get install postgresql) as root" >&2
  exit 1
fi
echo "postgres install: apt-get install postgresql"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq postgresql >/dev/null
bin="$(pg_bin_dir)" || { echo "postgres install: server binaries still missing" >&2; exit 1; }

# The package may create and start a default cluster on 5432 where services are allowed to start;
# we run our own cluster, so stop that one rather than leave a stray server behind.
if command -v pg_lsclusters >/dev/null; then
  pg_lsclusters --no-header 2>/dev/null | awk '$4 == "online" {print $1, $2}' |
    while read -r ver name; do pg_ctlcluster "$ver" "$name" stop || true; done
fi
echo "postgres install: $("$bin/postgres" --version)"
