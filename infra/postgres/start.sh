#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster on 127.0.0.1:$PG_PORT with database gfs, its owner role gfs
# (the migrations role) and one login role per service (gfs_quota, gfs_preemption), each with the
# password generated into $PG_CRED_DIR (common.sh). Their table privileges are granted after the
# migrations (`gfs db grant`, infra/stack.sh up). Idempotent: initdb only once, start only when
# stopped, roles/database created only when missing; every start sets the roles' passwords from
# the files (so deleting a file and starting again rotates that password).
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$PG_INFRA_DIR/install.sh"
# Again, now that the install may have created the postgres user the state dir depends on.
# shellcheck source=common.sh
source "$PG_INFRA_DIR/common.sh"
bin="$(pg_bin_dir)"

mkdir -p "$PG_STATE_DIR" "$PG_SOCKET_DIR"
if [[ "$(id -u)" == 0 ]]; then
  chown -R postgres:postgres "$PG_STATE_DIR"
  if ! runuser -u postgres -- test -w "$PG_STATE_DIR"; then
    echo "postgres: user 'postgres' cannot write $PG_STATE_DIR; set GFS_STACK_DIR to a folder it can reach" >&2
    exit 1
  fi
fi

if [[ ! -f "$PG_DATA_DIR/PG_VERSION" ]]; then
  echo "postgres: initdb $PG_DATA_DIR"
  # trust on the unix socket (only the owner can reach it, the dir is ours); scram on TCP.
  pg_as_owner "$bin/initdb" -D "$PG_DATA_DIR" -U postgres -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 >"$PG_STATE_DIR/initdb.log"
fi

if pg_running; then
  echo "postgres: already running on $PG_HOST:$PG_PORT"
else
  # fsync/full_page_writes off: a throwaway dev/CI cluster trades crash safety for speed
  # (reset.sh rebuilds it). Loopback only.
  pg_as_owner "$bin/pg_ctl" -D "$PG_DATA_DIR" -l "$PG_LOG_FILE" -w -t 60 \
    -o "-c listen_addresses=$PG_HOST -p $PG_PORT -k $PG_SOCKET_DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
    start >/dev/null || { tail -n 30 "$PG_LOG_FILE" >&2; echo "postgres: failed to start" >&2; exit 1; }
  echo "postgres: started on $PG_HOST:$PG_PORT, log $PG_LOG_FILE"
fi

psql_admin() {
  pg_as_owner "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_SOCKET_DIR" -p "$PG_PORT" -U postgres "$@"
}
# The password goes through a psql variable on stdin, not the command line (ps would show it).
ensure_role() { # ensure_role ROLE
  local verb=ALTER
  if [[ "$(psql_admin -tAc "SELECT 1 FROM pg_roles WHERE rolname = '$1'")" != 1 ]]; then
    verb=CREATE
  fi
  psql_admin -v role="$1" -v pw="$(pg_password "$1")" <<<"$verb ROLE :\"role\" LOGIN PASSWORD :'pw';"
}
for role in "$PG_APP_USER" "$PG_QUOTA_USER" "$PG_PREEMPTION_USER"; do
  ensure_role "$role"
done
if [[ "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = '$PG_APP_DB'")" != 1 ]]; then
  psql_admin -c "CREATE DATABASE $PG_APP_DB OWNER $PG_APP_USER"
fi
echo "postgres: ready on $PG_HOST:$PG_PORT (roles $PG_APP_USER, $PG_QUOTA_USER, $PG_PREEMPTION_USER; passwords in $PG_CRED_DIR)"
