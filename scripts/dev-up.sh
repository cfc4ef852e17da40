#!/usr/bin/env bash
# Starts the whole Flashgate stack locally, in the foreground (Ctrl-C stops all of it), and ends
# by creating a demo sale and printing a purchase to paste, which answers 201 Created:
#   - Postgres and Redis through scripts/services.sh (installed with apt-get when missing,
#     started when down);
#   - three extra independent redis-server nodes for Redlock (ports 6380-6382);
#   - a `flashgate` database, the origin on 127.0.0.1:8080 (migrations applied at startup);
#   - the edge worker in workerd on 127.0.0.1:8787 (scripts/edge-dev.sh; the first run installs
#     the edge toolchain into .tools/ and node_modules/, which takes a few minutes);
#   - once both answer GET /readyz: PUT of the demo SKU through the admin API (DEMO_SKU, default
#     DEMO-1: 100 in stock, at most 2 per shopper; a PUT on every start restocks it), a session
#     token minted for a new shopper (edge/examples/mint-token.rs), the demo sale page's URL (the
#     token in its fragment, which never leaves the browser: open it and click Buy) and the `curl`
#     purchase through the edge, printed and saved to .local/demo-purchase.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/rust-toolchain.sh
bash scripts/services.sh

state=.local
mkdir -p "$state"
log() { printf '[dev-up] %s\n' "$*" >&2; }

# Each background process gets its own process group (set -m), so that stopping the stack stops
# what they started too (cargo during the edge build, workerd under wrangler).
set -m
pids=()
started_redis=() # only the nodes this run started are stopped with it (another's are left up)
cleanup() {
  for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
  for port in "${started_redis[@]}"; do redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for port in 6380 6381 6382; do
  if ! redis-cli -p "$port" ping >/dev/null 2>&1; then
    redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
      --dir "$PWD/$state" --logfile "$PWD/$state/redis-$port.log"
    started_redis+=("$port")
  fi
done

psql -h 127.0.0.1 -U postgres -tc "SELECT 1 FROM pg_database WHERE datname = 'flashgate'" | grep -q 1 \
  || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE flashgate" >/dev/null

# Local development secrets (never used in production; see docs/configuration.md).
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
# The edge's optional secrets: the waiting room's and the proof of work's (docs/bot-defence.md).
if [[ -z ${ROOM_SECRETS:-} ]]; then
  export ROOM_SECRET=${ROOM_SECRET:-dev-room-secret-change-me}
fi
if [[ -z ${POW_SECRETS:-} ]]; then
  export POW_SECRET=${POW_SECRET:-dev-pow-secret-change-me}
fi
export LOG_FORMAT=${LOG_FORMAT:-pretty}
EDGE_PORT=${EDGE_PORT:-8787}
DEMO_SKU=${DEMO_SKU:-DEMO-1}
ORIGIN=http://$LISTEN_ADDR
EDGE=http://127.0.0.1:$EDGE_PORT

# The origin and the token minter in one build (they share their dependencies).
cargo build --release -p origin -p edge --bin origin --example mint-token
./target/release/origin &
pids+=($!)
origin_pid=$!
EDGE_PORT=$EDGE_PORT bash scripts/edge-dev.sh &
pids+=($!)
edge_pid=$!

# GET <url>/readyz until 200, while <pid> runs; <limit> seconds at most.
wait_ready() { # <name> <url> <pid> <limit>
  local deadline=$((SECONDS + $4))
  until [[ $(curl -s -o /dev/null -w '%{http_code}' "$2/readyz") == 200 ]]; do
    kill -0 "$3" 2>/dev/null || { log "the $1 exited before it was ready; see its output above"; exit 1; }
    ((SECONDS < deadline)) || { log "the $1 at $2 was not ready within $4 s"; exit 1; }
    sleep 1
  done
}

# The demo sale, as soon as the origin is ready (a Redis node seen for the first time sits out
# one LOCK_TTL_MS before it counts: the Redlock restart guard).
log "waiting for the origin's GET /readyz (it logs each 503 before it is ready as an error)"
wait_ready origin "$ORIGIN" "$origin_pid" 120
admin_token=${ADMIN_TOKEN:-${ADMIN_TOKENS%%,*}}
admin_token=$(echo "$admin_token" | tr -d '[:space:]')
sale='{"name":"Demo sneaker","price_cents":9900,"stock":100,"max_per_user":2}'
code=$(curl -s -o "$state/demo-sku.json" -w '%{http_code}' -X PUT "$ORIGIN/v1/admin/skus/$DEMO_SKU" \
  -H "Authorization: Bearer $admin_token" -H 'Content-Type: application/json' --data "$sale")
if [[ $code != 200 ]]; then
  log "creating the demo sale answered $code: $(cat "$state/demo-sku.json")"
  exit 1
fi
log "demo sale $DEMO_SKU: $(cat "$state/demo-sku.json")"

# A new shopper each start: the per-shopper cap counts every purchase ever made of the SKU.
shopper=demo-$(date +%s)
mint=(./target/release/examples/mint-token --sub "$shopper" --ttl 86400)
if [[ -n ${SESSION_SECRETS:-} ]]; then # the first (current) key, named by its kid
  first=$(echo "${SESSION_SECRETS%%,*}" | tr -d '[:space:]')
  mint+=(--kid "${first%%:*}" --secret "${first#*:}")
else
  mint+=(--secret "$SESSION_SECRET")
fi
token=$("${mint[@]}")

# The edge: the first start builds its toolchain and the worker.
if [[ $(curl -s -o /dev/null -w '%{http_code}' "$EDGE/readyz") != 200 ]]; then
  log "waiting for the edge on $EDGE (the first start installs the edge toolchain and builds the worker: a few minutes)"
fi
wait_ready edge "$EDGE" "$edge_pid" 1800

cat >"$state/demo-purchase.sh" <<EOF
curl -i $EDGE/v1/purchases \\
  -H 'Authorization: Bearer $token' \\
  -H 'Idempotency-Key: $shopper-1' \\
  -H 'Content-Type: application/json' \\
  -d '{"sku":"$DEMO_SKU","qty":1}'
EOF
sale_page="$EDGE/sale/$DEMO_SKU#token=$token"
echo "$sale_page" >"$state/demo-sale-page.url"
cat <<EOF

================================================================================================
Flashgate is up: origin $ORIGIN, edge $EDGE. Ctrl-C stops the stack.

The demo sale page, as shopper $shopper (open it in a browser and click Buy; saved as
$state/demo-sale-page.url; the token rides in the URL fragment, which the browser never sends —
local demos only: a real shop sets the HttpOnly flashgate_session cookie instead):

  $sale_page

Demo sale $DEMO_SKU: 100 in stock, at most 2 per shopper. Buy one as shopper $shopper through the
edge (paste into another terminal; saved as $state/demo-purchase.sh):

$(cat "$state/demo-purchase.sh")

It answers 201 Created with the order. The same command again replays that answer
(Idempotent-Replayed: true); another Idempotency-Key buys a second unit, a third gets 409
purchase_limit. Stock left: curl $EDGE/v1/skus/$DEMO_SKU
================================================================================================

EOF
wait -n "${pids[@]}"
