#!/usr/bin/env bash
# Run by the postgres image on the first start of an empty volume (/docker-entrypoint-initdb.d):
# creates the quota and the preemption service's login roles with the passwords compose passes
# (docker-compose.yml). Their table privileges come after the migrations (the db-grant service).
set -euo pipefail
for pair in "gfs_quota:$GFS_POSTGRES_QUOTA_PASSWORD" "gfs_preemption:$GFS_POSTGRES_PREEMPTION_PASSWORD"; do
  psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v role="${pair%%:*}" -v pw="${pair#*:}" <<<"CREATE ROLE :\"role\" LOGIN PASSWORD :'pw';"
done
