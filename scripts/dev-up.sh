#!/usr/bin/env bash
# Starts the whole Flashgate stack locally, in the foreground (Ctrl-C stops all of it):
# Postgres and Redis (if down), three extra independent redis-server nodes for Redlock
# (ports 6380-6382), a `flashgate` database, the origin on 127.0.0.1:8080 and, once the edge is
# built, the edge worker in workerd on 127.0.0.1:8787.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/services.sh

state=.local
mkdir -p "$state"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for port in 6380 6381 6382; do redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

for port in 6380 6381 6382; do
  if ! redis-cli -p "$port" ping >/dev/null 2>&1; then
    redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
      --dir "$PWD/$state" --logfile "$PWD/$state/redis-$port.log"
  fi
done

psql -h 127.0.0.1 -U postgres -tc "SELECT 1 FROM pg_database WHERE datname = 'flashgate'" | grep -q 1 \
  || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE flashgate" >/dev/null

# Local development secrets (never used in production; see README "Configuration").
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/flashgate}
export REDIS_URLS=${REDIS_URLS:-redis://127.0.0.1:6380,redis://127.0.0.1:6381,redis://127.0.0.1:6382}
export LISTEN_ADDR=${LISTEN_ADDR:-127.0.0.1:8080}
# Each secret has a list form (…_SECRETS / ADMIN_TOKENS, for rotations) and a single form; the
# single form's default applies only when neither is set (setting both is an error).
if [[ -z ${EDGE_SHARED_SECRETS:-} ]]; then
  export EDGE_SHARED_SECRET=${EDGE_SHARED_SECRET:-dev-edge-shared-secret-change-me}
fi
if [[ -z ${ADMIN_TOKENS:-} ]]; then
  export ADMIN_TOKEN=${ADMIN_TOKEN:-dev-admin-token-change-me}
fi
if [[ -z ${SESSION_SECRETS:-} ]]; then
  export SESSION_SECRET=${SESSION_SECRET:-dev-session-secret-change-me}
fi
export LOG_FORMAT=${LOG_FORMAT:-pretty}

cargo build --release -p origin
./target/release/origin &
pids+=($!)

if [[ -x scripts/edge-dev.sh ]]; then
  bash scripts/edge-dev.sh &
  pids+=($!)
fi
echo "origin: http://$LISTEN_ADDR   (Ctrl-C stops the stack)"
wait -n "${pids[@]}"
