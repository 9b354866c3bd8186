# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this
# Sourced by the infra/postgres scripts: paths and settings of the throwaway dev/CI cluster.
PG_INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
GFS_REPO_DIR="$(cd "$PG_INFRA_DIR/../.." && pwd)"
GFS_STACK_DIR="${GFS_STACK_DIR:-$GFS_REPO_DIR/.stack}"
PG_STATE_DIR="$GFS_STACK_DIR/postgres"   # git-ignored; owned by the postgres user when run as root
# As root the server runs as 'postgres', which must traverse every parent folder of its data dir; a
# checkout under e.g. /root is not traversable, so the cluster then lives in a per-checkout /tmp dir.
if [[ "$(id -u)" == 0 ]] && id postgres >/dev/null 2>&1 &&
  ! runuser -u postgres -- test -x "$GFS_REPO_DIR" 2>/dev/null; then
  PG_STATE_DIR="/tmp/gfs-postgres-$(echo "$GFS_REPO_DIR" | sha256sum | cut -c1-12)"
fi
PG_DATA_DIR="$PG_STATE_DIR/data"
PG_SOCKET_DIR="$PG_STATE_DIR/run"        # our own socket dir: /var/run/postgresql may not exist
PG_LOG_FILE="$PG_STATE_DIR/postgres.log"
PG_HOST=127.0.0.1
PG_PORT="${GFS_PG_PORT:-55432}"          # not 5432, so a system cluster can never collide
PG_APP_USER=gfs
PG_APP_PASSWORD=gfs
PG_APP_DB=gfs
GFS_DATABASE_URL="postgresql://$PG_APP_USER:$PG_APP_PASSWORD@$PG_HOST:$PG_PORT/$PG_APP_DB"

# Debian's server binaries, newest major version. /usr/local/bin/pg_ctl and friends on PATH may be
# wrappers or another version, so the versioned bin dir is named explicitly.
pg_bin_dir() {
  local d
  d="$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)"
  [[ -n "$d" && -x "$d/initdb" && -x "$d/pg_ctl" ]] || return 1
  echo "$d"
}

# initdb and the server refuse to run as root: as root, run them as the postgres user.
pg_as_owner() {
  if [[ "$(id -u)" == 0 ]]; then
    # From /: the caller's cwd may be one the postgres user cannot enter.
    (cd / && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

# True when the server of our data dir is running (pg_ctl reads postmaster.pid and checks the PID).
pg_running() {
  local bin
  bin="$(pg_bin_dir)" || return 1
  [[ -f "$PG_DATA_DIR/PG_VERSION" ]] || return 1
  pg_as_owner "$bin/pg_ctl" -D "$PG_DATA_DIR" status >/dev/null 2>&1
}
