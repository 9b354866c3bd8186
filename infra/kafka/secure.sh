#!/usr/bin/env bash
# A secured single Kafka broker beside the shared plaintext one: SASL_SSL (TLS + SCRAM-SHA-512),
# one principal per service and per node agent, and the ACLs of services/platform/kafka/acls.py
# (StandardAuthorizer, deny by default). Its own ports, folder and PID file, so starting it never
# touches the broker on 9092. For the security tests (docs/operations.md, "Kafka security").
#   up        make the CA, broker certificate and passwords (once), format with the SCRAM users
#             (once), start, wait, apply the ACLs, create the registry's topics
#   down      stop (data kept)        reset   down, then wipe the folder (certificates and passwords too)
#   status    exit 0 only when it runs
#   env [PRINCIPAL]   the exports a client of PRINCIPAL needs (default admin): KAFKA_BOOTSTRAP_SERVERS,
#             KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD,
#             KAFKA_SSL_CAFILE
# Settings (environment):
#   KAFKA_SECURE_DIR     state folder (default .stack/kafka-secure)
#   KAFKA_SECURE_PORT    clients on PORT, the controller on PORT+1 (default 29392)
#   KAFKA_SECURE_AGENTS  the nodes that get an agent principal, space-separated (default "n1 n2 n3")
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SECURE_DIR="${KAFKA_SECURE_DIR:-$GFS_STACK_DIR/kafka-secure}"
PORT="${KAFKA_SECURE_PORT:-29392}"
CONTROLLER_PORT=$((PORT + 1))
read -r -a AGENTS <<<"${KAFKA_SECURE_AGENTS:-n1 n2 n3}"
TLS_DIR="$SECURE_DIR/tls"
CRED_DIR="$SECURE_DIR/credentials"
PID_FILE="$SECURE_DIR/kafka.pid"
PYTHON="$GFS_REPO_DIR/.venv/bin/python"

acl_table() { (cd "$GFS_REPO_DIR" && PYTHONPATH="$GFS_REPO_DIR" "$PYTHON" -m gfs.services.platform.kafka.acls "$@" "${AGENTS[@]}"); }

broker_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE")"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'kafka\.Kafka' || return 1
  echo "$pid"
}

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Secrets are made here, once per folder, readable by this user only; nothing shipped holds one.
secret() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

password_of() {
  local file="$CRED_DIR/$1"
  if [[ ! -s "$file" ]]; then
    mkdir -p "$CRED_DIR"
    (umask 077 && secret >"$file")
  fi
  cat "$file"
}

# A throwaway CA and a broker certificate for 127.0.0.1 and localhost (clients verify the host),
# in a PKCS12 keystore for the broker and ca.pem for the clients (KAFKA_SSL_CAFILE).
make_tls() {
  [[ -s "$TLS_DIR/broker.p12" && -s "$TLS_DIR/ca.pem" ]] && return 0
  mkdir -p "$TLS_DIR"
  chmod 700 "$TLS_DIR"
  local t="$TLS_DIR"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=gfs-dev-ca" \
    -keyout "$t/ca.key" -out "$t/ca.pem" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$t/broker.key" -out "$t/broker.csr" >/dev/null 2>&1
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$t/broker.ext"
  openssl x509 -req -in "$t/broker.csr" -CA "$t/ca.pem" -CAkey "$t/ca.key" -CAcreateserial \
    -days 30 -extfile "$t/broker.ext" -out "$t/broker.pem" >/dev/null 2>&1
  openssl pkcs12 -export -in "$t/broker.pem" -inkey "$t/broker.key" -certfile "$t/ca.pem" \
    -name broker -passout "pass:$(password_of .keystore)" -out "$t/broker.p12"
  rm -f "$t/broker.csr" "$t/broker.ext" "$t/ca.key"  # the CA signs once: its key is not kept
}

render() {
  mkdir -p "$SECURE_DIR/data" "$SECURE_DIR/logs"
  (umask 077 && sed -e "s|@PORT@|$PORT|g" -e "s|@CONTROLLER_PORT@|$CONTROLLER_PORT|g" \
    -e "s|@DATA_DIR@|$SECURE_DIR/data|" -e "s|@TLS_DIR@|$TLS_DIR|" \
    -e "s|@ADMIN_PASSWORD@|$(password_of admin)|g" -e "s|@KEYSTORE_PASSWORD@|$(password_of .keystore)|" \
    "$KAFKA_INFRA_DIR/secure-server.properties.in" >"$SECURE_DIR/server.properties")
  # What the admin tools (kafka-acls) authenticate with.
  (umask 077 && cat >"$SECURE_DIR/admin.properties" <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(password_of admin)";
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
PROPS
  )
}

# The SCRAM users go into the metadata log at format time (the broker's own admin login needs one
# before it can serve anything); a cluster id is made here to save a JVM start.
format() {
  [[ -f "$SECURE_DIR/data/meta.properties" ]] && return 0
  local id="-" user args=()
  while [[ "$id" == -* ]]; do id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"; done
  while read -r user; do
    args+=(--add-scram "SCRAM-SHA-512=[name=$user,password=$(password_of "$user")]")
  done < <(acl_table principals)
  if ! KAFKA_LOGS_DIR="$SECURE_DIR/logs" "$KAFKA_INFRA_DIR/kafka-java.sh" kafka.tools.StorageTool format \
      --config "$SECURE_DIR/server.properties" --cluster-id "$id" "${args[@]}" >"$SECURE_DIR/logs/format.log" 2>&1; then
    echo "kafka-secure: formatting failed:" >&2
    cat "$SECURE_DIR/logs/format.log" >&2
    return 1
  fi
}

start() {
  local pid p
  if pid="$(broker_pid)"; then
    echo "kafka-secure: already running (pid $pid)"
    return 0
  fi
  for p in "$PORT" "$CONTROLLER_PORT"; do
    if port_taken "$p"; then
      echo "kafka-secure: port $p is taken by a process this script did not start" >&2
      return 1
    fi
  done
  make_tls
  render
  format
  [[ -f "$SECURE_DIR/logs/server.log" ]] && mv "$SECURE_DIR/logs/server.log" "$SECURE_DIR/logs/server.log.prev"
  KAFKA_HEAP_OPTS="${KAFKA_SECURE_HEAP:--Xmx384m -Xms128m}" KAFKA_LOGS_DIR="$SECURE_DIR/logs" \
  KAFKA_LOG4J="$KAFKA_INFRA_DIR/broker-log4j.properties" \
    setsid nohup "$KAFKA_INFRA_DIR/kafka-java.sh" kafka.Kafka "$SECURE_DIR/server.properties" \
    </dev/null >"$SECURE_DIR/logs/stdout.log" 2>&1 &
  echo $! >"$PID_FILE"
  await_exec "$!" "java " || true # wait_ready reports a broker that died at once
  echo "kafka-secure: started (pid $!, SASL_SSL 127.0.0.1:$PORT), logs in $SECURE_DIR/logs"
}

wait_ready() {
  local deadline=$((SECONDS + ${KAFKA_WAIT_TIMEOUT:-120}))
  while ((SECONDS < deadline)); do
    if ! broker_pid >/dev/null; then
      echo "kafka-secure: the broker is not running; its errors, then the end of its log:" >&2
      grep -E -A3 'ERROR|FATAL' "$SECURE_DIR/logs/server.log" 2>/dev/null | head -n 40 >&2 || true
      tail -n 10 "$SECURE_DIR/logs/server.log" "$SECURE_DIR/logs/stdout.log" >&2 2>/dev/null || true
      return 1
    fi
    if grep -q 'Kafka Server started' "$SECURE_DIR/logs/server.log" 2>/dev/null && port_taken "$PORT"; then
      return 0
    fi
    sleep 1
  done
  echo "kafka-secure: not ready after ${KAFKA_WAIT_TIMEOUT:-120}s" >&2
  tail -n 30 "$SECURE_DIR/logs/server.log" >&2 2>/dev/null || true
  return 1
}

# One kafka-acls run per rule of the table (adding an ACL that exists is a no-op, so `up` may
# rerun), KAFKA_SECURE_ACL_JOBS at a time: each is a JVM start, most of `up`'s time.
acl_one() {
  local n="$1" rule=()
  IFS=$'\t' read -r -a rule <<<"$2"
  if ! KAFKA_LOGS_DIR="$SECURE_DIR/logs" "$KAFKA_INFRA_DIR/kafka-java.sh" kafka.admin.AclCommand \
      --bootstrap-server "127.0.0.1:$PORT" --command-config "$SECURE_DIR/admin.properties" \
      --add --force "${rule[@]}" >"$SECURE_DIR/logs/acl-$n.log" 2>&1; then
    echo "kafka-secure: kafka-acls failed for: ${rule[*]}" >&2
    tail -n 20 "$SECURE_DIR/logs/acl-$n.log" >&2
    return 1
  fi
}

apply_acls() {
  # In rounds of KAFKA_SECURE_ACL_JOBS, waiting on those pids only (the broker is a job too).
  local line n=0 failed=0 jobs="${KAFKA_SECURE_ACL_JOBS:-3}" pid pids=()
  while IFS= read -r line; do
    n=$((n + 1))
    acl_one "$n" "$line" &
    pids+=("$!")
    if ((${#pids[@]} >= jobs)); then
      for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
      pids=()
    fi
  done < <(acl_table rules)
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  ((failed == 0)) || return 1
  echo "kafka-secure: $n ACL rules applied"
}

client_env() {
  local user="${1:-admin}"
  [[ -s "$CRED_DIR/$user" ]] || { echo "kafka-secure: no principal $user (known: $(ls "$CRED_DIR" | tr '\n' ' '))" >&2; return 1; }
  echo "export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$PORT"
  echo "export KAFKA_SECURITY_PROTOCOL=SASL_SSL"
  echo "export KAFKA_SASL_MECHANISM=SCRAM-SHA-512"
  echo "export KAFKA_SASL_USERNAME=$user"
  echo "export KAFKA_SASL_PASSWORD=$(cat "$CRED_DIR/$user")"
  echo "export KAFKA_SSL_CAFILE=$TLS_DIR/ca.pem"
}

stop() {
  local pid
  if ! pid="$(broker_pid)"; then
    rm -f "$PID_FILE"
    echo "kafka-secure: not running"
    return 0
  fi
  stop_pid kafka-secure "$pid" "${KAFKA_STOP_TIMEOUT:-30}"
  rm -f "$PID_FILE"
  echo "kafka-secure: stopped"
}

case "${1:-}" in
  up)
    "$KAFKA_INFRA_DIR/fetch.sh"
    # openssl makes the CA and certificate; Debian's base images ship it, minimal CI images may not.
    if ! command -v openssl >/dev/null; then
      [[ "$(id -u)" == 0 ]] || { echo "kafka-secure: openssl is required" >&2; exit 1; }
      echo "kafka-secure: apt-get install openssl"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
    fi
    start
    wait_ready
    apply_acls
    # The registry's topics, created as the super user (the services may not create them).
    eval "$(client_env admin)"
    (cd "$GFS_REPO_DIR" && PYTHONPATH="$GFS_REPO_DIR" "$PYTHON" -c 'from gfs.services.entry import main; main()' stack topics >/dev/null)
    echo "kafka-secure: ready on SASL_SSL 127.0.0.1:$PORT" ;;
  down) stop ;;
  reset)
    stop
    rm -rf "$SECURE_DIR"
    echo "kafka-secure: data wiped" ;;
  status)
    if pid="$(broker_pid)"; then echo "kafka-secure: up (pid $pid, SASL_SSL 127.0.0.1:$PORT)"
    else echo "kafka-secure: down"; exit 1; fi ;;
  env) client_env "${2:-admin}" ;;
  *) echo "usage: infra/kafka/secure.sh up|down|reset|status|env [PRINCIPAL]" >&2; exit 2 ;;
esac
