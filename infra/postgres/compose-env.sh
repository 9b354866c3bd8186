#!/usr/bin/env bash
# Writes .env at the repository root (git-ignored, mode 600) with a generated password for each
# Postgres role docker-compose.yml creates: GFS_POSTGRES_PASSWORD (gfs, the owner/migrations role),
# GFS_POSTGRES_QUOTA_PASSWORD (gfs_quota) and GFS_POSTGRES_PREEMPTION_PASSWORD (gfs_preemption).
# Idempotent: a variable already in .env is kept (the database volume was created with it).
set -euo pipefail
env_file="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.env"
umask 077
touch "$env_file"
chmod 600 "$env_file"
for name in GFS_POSTGRES_PASSWORD GFS_POSTGRES_QUOTA_PASSWORD GFS_POSTGRES_PREEMPTION_PASSWORD; do
  if ! grep -q "^$name=" "$env_file"; then
    echo "$name=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" >>"$env_file"
    echo "compose-env: generated $name in $env_file"
  fi
done
