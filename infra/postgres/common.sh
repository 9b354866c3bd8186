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
PG_APP_USER=gfs                          # owns the database and every table: the migrations role
PG_APP_DB=gfs
# One login role per service, with only DML on its own tables (services/platform/db_roles.py).
PG_QUOTA_USER=gfs_quota
PG_PREEMPTION_USER=gfs_preemption
# Each role's password: generated once per checkout (mode 600), never a literal in the repository.
# Outside PG_STATE_DIR so `reset` (which wipes the cluster) keeps them and a root-run cluster's
# chown does not take them; start.sh sets every role's password from these files on each start.
PG_CRED_DIR="$GFS_STACK_DIR/postgres-credentials"

# The password of ROLE (gfs, gfs_quota, gfs_preemption), created on first use.
pg_password() {
  local file="$PG_CRED_DIR/$1"
  if [[ ! -s "$file" ]]; then
    # A private temp file, then a no-clobber rename: of two first uses at once, the first wins and
    # both read its password.
    local tmp
    # Only the credentials folder is private: as root the postgres user must still traverse the
    # stack folder to reach its cluster.
    mkdir -p "$GFS_STACK_DIR"
    tmp="$(umask 077 && mkdir -p "$PG_CRED_DIR" && mktemp "$PG_CRED_DIR/.$1.XXXXXX")"
    head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp"
    mv -n "$tmp" "$file"
    rm -f "$tmp"
  fi
  cat "$file"
}

# The URL ROLE connects with (hex passwords need no escaping).
pg_url() {
  echo "postgresql://$1:$(pg_password "$1")@$PG_HOST:$PG_PORT/$PG_APP_DB"
}

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
