#!/usr/bin/env bash
# HTTP fuzzing of the edge (the built Worker in workerd, `wrangler dev`) from its own OpenAPI
# description, with schemathesis, on loopback only. The edge counterpart of scripts/fuzz-http.sh.
#
#   bash scripts/fuzz-http-edge.sh
#
# Environment (all optional):
#   FUZZ_HTTP_MAX_EXAMPLES  generated cases per operation and phase      (default 100)
#   FUZZ_HTTP_TIMEOUT       hard limit in seconds for each schemathesis pass (default 600)
#   FUZZ_HTTP_SEED          schemathesis seed, to replay a run           (default: random)
#
# Needs the built edge (edge/build/wrangler.toml, edge/build/index_bg.wasm: scripts/test-edge.sh
# or the edge build builds it) and node_modules/.bin/wrangler; builds target/debug/origin only
# when it is missing.
#
# Steps: installs schemathesis (pinned) into .tools/venv when missing; makes sure Postgres and
# Redis run (scripts/services.sh); creates a fresh database; starts target/debug/origin on a free
# 127.0.0.1 port with a unique Redis key prefix, then the edge in workerd (`wrangler dev`, fresh
# persisted state, its own process group) in front of it with the same edge secret; seeds one SKU
# on the origin (stock 25, at most 2 per user); mints a valid shopper JWT (HS256 over the session
# secret, `kid`, `exp` in two hours); runs schemathesis against the edge's live GET /openapi.json
# with the `not_a_server_error` check in three passes — every operation with the shopper token,
# GET /warmup alone with the admin token, every operation without credentials. The edge runs with
# a rate limit high enough (a burst of 10,000 per hour) that purchases reach the idempotency gate and the
# origin rather than stopping at 429.
# Then it checks the origin's books against what the edge answered: the SKUs in the database are
# exactly the seed; every order is the shopper's and of the seed SKU; the order ids in the
# database are exactly those of the non-replayed 201 answers; the seed's stock fell by exactly
# the units of those orders, at most its per-user cap, and nothing else about it changed; every
# anonymous purchase was refused with a 4xx. Any 5xx counts (the origin runs, so not even a 503
# is expected). Prints one summary line; exits non-zero on any 5xx or inconsistent state.
# The edge and the origin are stopped, the database dropped and the Redis keys deleted on exit.
# Reports (HAR files, schemathesis output, origin and wrangler logs) stay in target/fuzz-http-edge/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

SCHEMATHESIS_VERSION=4.32.5
MAX_EXAMPLES=${FUZZ_HTTP_MAX_EXAMPLES:-100}
PASS_TIMEOUT=${FUZZ_HTTP_TIMEOUT:-600}
VENV=.tools/venv
OUT=target/fuzz-http-edge
WRANGLER=node_modules/.bin/wrangler
PSQL=(psql -h 127.0.0.1 -U postgres -v ON_ERROR_STOP=1 -qAt)

log() { echo "fuzz-http-edge: $*" >&2; }

# --- tools and services ---------------------------------------------------------------------
for built in edge/build/wrangler.toml edge/build/index_bg.wasm "$WRANGLER"; do
  [[ -e $built ]] || { log "$built missing: build the edge first (scripts/test-edge.sh)"; exit 1; }
done
if [[ ! -x $VENV/bin/python ]]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
if [[ "$("$VENV/bin/schemathesis" --version 2>/dev/null | awk '{ print $NF }')" != "$SCHEMATHESIS_VERSION" ]]; then
  log "installing schemathesis $SCHEMATHESIS_VERSION into $VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi
bash scripts/services.sh

if [[ ! -x target/debug/origin ]]; then
  log "building the origin"
  cargo build -p origin --locked --quiet
fi

# --- a fresh database, a unique prefix, free ports, secrets -------------------------------------
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
random_hex() { od -An -N12 -tx1 /dev/urandom | tr -d ' \n'; }
RUN_ID="$(date +%s)_$$_$RANDOM"
DB="flashgate_fuzz_edge_$RUN_ID"
PREFIX="fuzzhttpedge_$RUN_ID"
ORIGIN_PORT=$(free_port)
EDGE_PORT=$(free_port)
INSPECTOR_PORT=$(free_port)
ORIGIN="http://127.0.0.1:$ORIGIN_PORT"
BASE="http://127.0.0.1:$EDGE_PORT"
ADMIN_TOKEN="fuzz-admin-$(random_hex)"
EDGE_SECRET="fuzz-edge-$(random_hex)"
SESSION_SECRET="fuzz-session-$(random_hex)"
SESSION_KID=s1
EDGE_KID=e1
SHOPPER=fuzz-shopper
SEED_SKU="fuzz-seed-$RANDOM"
SEED_STOCK=25
SEED_CAP=2
ORIGIN_PID=""
EDGE_PID=""

rm -rf "$OUT"
mkdir -p "$OUT"

stop_pid() { # pid, group (1 = the pid leads its own process group: signal the whole group)
  local pid=$1 target=$1
  [[ $2 == 1 ]] && target="-$1"
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM -- "$target" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL -- "$target" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$?
  # wrangler runs node, esbuild and workerd: it was started as the leader of its own group.
  [[ -n $EDGE_PID ]] && stop_pid "$EDGE_PID" 1
  [[ -n $ORIGIN_PID ]] && stop_pid "$ORIGIN_PID" 0
  "${PSQL[@]}" -d postgres -c "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" >/dev/null 2>&1 ||
    log "could not drop database $DB"
  redis-cli -h 127.0.0.1 -p 6379 --scan --pattern "${PREFIX}*" 2>/dev/null |
    xargs -r redis-cli -h 127.0.0.1 -p 6379 del >/dev/null 2>&1 || true
  rm -rf "$OUT/edge-state"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_ready() { # url, what, pid, log file, tries (0.2 s apart)
  for _ in $(seq 1 "$5"); do
    if ! kill -0 "$3" 2>/dev/null; then
      log "$2 exited; its log:"; tail -n 30 "$4" >&2; return 1
    fi
    if [[ "$(curl -s -o /dev/null -w '%{http_code}' "$1")" == 200 ]]; then return 0; fi
    sleep 0.2
  done
  log "$2: GET $1 never answered 200; its log:"; tail -n 30 "$4" >&2; return 1
}

"${PSQL[@]}" -d postgres -c "CREATE DATABASE \"$DB\""
log "database $DB, origin on $ORIGIN, edge on $BASE, redis prefix $PREFIX"

DATABASE_URL="postgres://postgres@127.0.0.1:5432/$DB" \
  REDIS_URLS="redis://127.0.0.1:6379" \
  REDIS_KEY_PREFIX="$PREFIX" \
  LISTEN_ADDR="127.0.0.1:$ORIGIN_PORT" \
  EDGE_SHARED_SECRETS="$EDGE_KID:$EDGE_SECRET" EDGE_SHARED_SECRET= \
  ADMIN_TOKENS="$ADMIN_TOKEN" ADMIN_TOKEN= \
  RUST_LOG="${RUST_LOG:-warn}" \
  target/debug/origin >"$OUT/origin.log" 2>&1 &
ORIGIN_PID=$!
wait_ready "$ORIGIN/readyz" "the origin" "$ORIGIN_PID" "$OUT/origin.log" 150

# The vars as edge/e2e/harness.mjs passes them (list forms; the single forms empty = unset). The
# origin timeout is generous: the origin runs, so a 503 here would be a finding, not load.
setsid env WRANGLER_SEND_METRICS=false "$WRANGLER" dev \
  --config "$ROOT/edge/build/wrangler.toml" \
  --ip 127.0.0.1 --port "$EDGE_PORT" --inspector-port "$INSPECTOR_PORT" \
  --persist-to "$ROOT/$OUT/edge-state" \
  --show-interactive-dev-session=false --log-level warn \
  --var "ORIGIN_URL:$ORIGIN" \
  --var "SESSION_SECRETS:$SESSION_KID:$SESSION_SECRET" --var "SESSION_SECRET:" \
  --var "EDGE_SHARED_SECRETS:$EDGE_KID:$EDGE_SECRET" --var "EDGE_SHARED_SECRET:" \
  --var "ADMIN_TOKENS:$ADMIN_TOKEN" --var "ADMIN_TOKEN:" \
  --var "RATE_LIMIT_QUOTA:10000" --var "RATE_LIMIT_WINDOW_SECS:3600" \
  --var "ORIGIN_TIMEOUT_MS:20000" \
  </dev/null >"$OUT/wrangler.log" 2>&1 &
EDGE_PID=$!
wait_ready "$BASE/healthz" "wrangler dev" "$EDGE_PID" "$OUT/wrangler.log" 900

# --- seed, token ---------------------------------------------------------------------------------
code=$(curl -s -o "$OUT/seed.json" -w '%{http_code}' -X PUT "$ORIGIN/v1/admin/skus/$SEED_SKU" \
  -H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \
  --data "{\"name\":\"Fuzz seed\",\"price_cents\":1999,\"stock\":$SEED_STOCK,\"max_per_user\":$SEED_CAP}")
[[ $code == 200 ]] || { log "seeding $SEED_SKU answered $code"; exit 1; }
SEED_BEFORE=$(curl -s "$ORIGIN/v1/skus/$SEED_SKU")

# The token through the edge must work before fuzzing means anything: one GET of the seed through
# the edge (no purchase, which would change the books before the run).
code=$(curl -s -o /dev/null -w '%{http_code}' "$BASE/v1/skus/$SEED_SKU")
[[ $code == 200 ]] || { log "GET /v1/skus/$SEED_SKU through the edge answered $code"; exit 1; }

JWT=$(python3 - "$SESSION_KID" "$SESSION_SECRET" "$SHOPPER" <<'PY'
import base64, hashlib, hmac, json, sys, time
kid, secret, sub = sys.argv[1:]
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
part = lambda o: b64(json.dumps(o, separators=(",", ":")).encode())
signing_input = part({"alg": "HS256", "typ": "JWT", "kid": kid}) + "." + part({"sub": sub, "exp": int(time.time()) + 7200})
mac = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
print(signing_input + "." + b64(mac))
PY
)
# A token the edge refuses would turn the shopper pass into a second anonymous pass: check it is
# accepted (a body-less purchase gets past authentication to a 400, not 401).
code=$(curl -s -o "$OUT/token-check.json" -w '%{http_code}' -X POST "$BASE/v1/purchases" \
  -H "Authorization: Bearer $JWT" -H 'Idempotency-Key: fuzz-token-check' \
  -H 'Content-Type: application/json' --data '{')
[[ $code == 400 ]] || { log "the minted token check answered $code (want 400): $(cat "$OUT/token-check.json")"; exit 1; }

# --- schemathesis --------------------------------------------------------------------------------
# Dictionaries steer part of the values to the seed SKU (so purchases and views reach the origin;
# GET /warmup's `sku` is an array, which a dictionary cannot fill)
# and to a few fixed idempotency keys (so replays, `idempotency_key_reused` and in-flight
# conflicts happen); the rest of each value is generated freely.
# No persistent schemathesis state (it would otherwise write .schemathesis/ into the work tree).
cat >"$OUT/shopper.toml" <<EOF
[cache]
enabled = false
[dictionaries.seed]
values = ["$SEED_SKU", "no-such-sku"]
[dictionaries.keys]
values = ["fuzz-key-1", "fuzz-key-2", "fuzz-key-3", "fuzz-key-4", "fuzz-key-5", "fuzz-key-6", "\"fuzz-key-1\""]
[dictionaries.qty]
values = [1, 2, 3, 100]
[parameters]
"path.sku" = { dictionary = "seed", probability = 0.6 }
"body.sku" = { dictionary = "seed", probability = 0.6 }
"body.qty" = { dictionary = "qty", probability = 0.5 }
"header.Idempotency-Key" = { dictionary = "keys", probability = 0.3 }
EOF
cp "$OUT/shopper.toml" "$OUT/warmup.toml"
cp "$OUT/shopper.toml" "$OUT/anonymous.toml"

run_pass() { # name, extra args...
  local name=$1; shift
  local seed_args=()
  [[ -n ${FUZZ_HTTP_SEED:-} ]] && seed_args=(--seed "$FUZZ_HTTP_SEED")
  log "schemathesis pass '$name' (max $MAX_EXAMPLES examples per operation, ${PASS_TIMEOUT}s limit)"
  set +e
  # Run from $OUT, so nothing schemathesis writes lands in the work tree.
  (cd "$OUT" && timeout --signal=INT --kill-after=30 "$PASS_TIMEOUT" \
    "$ROOT/$VENV/bin/schemathesis" --config-file "$name.toml" run "$BASE/openapi.json" \
    --url "$BASE" \
    --checks not_a_server_error \
    --max-examples "$MAX_EXAMPLES" \
    --workers 2 \
    --request-timeout 30 \
    --max-redirects 0 \
    --suppress-health-check all \
    --generation-database none \
    --generation-allow-x00 true \
    --no-color \
    --report har --report-har-path "$name.har" \
    "${seed_args[@]}" "$@" >"$name.txt" 2>&1)
  local rc=$?
  set -e
  tail -n 25 "$OUT/$name.txt" >&2
  return "$rc"
}

START=$(date +%s)
st_failed=0
run_pass shopper -H "Authorization: Bearer $JWT" || st_failed=1
run_pass warmup -H "Authorization: Bearer $ADMIN_TOKEN" --include-path /warmup || st_failed=1
run_pass anonymous || st_failed=1
ELAPSED=$(( $(date +%s) - START ))

# --- state after the run -------------------------------------------------------------------------
SEED_AFTER=$(curl -s "$ORIGIN/v1/skus/$SEED_SKU")
"${PSQL[@]}" -d "$DB" -c "SELECT sku FROM skus ORDER BY sku" >"$OUT/skus-in-db.txt"
"${PSQL[@]}" -F ' ' -d "$DB" -c "SELECT order_id, sku, user_id, qty FROM orders ORDER BY order_id" >"$OUT/orders-in-db.txt"

"$VENV/bin/python" - "$OUT" "$SEED_SKU" "$SHOPPER" "$SEED_CAP" "$SEED_BEFORE" "$SEED_AFTER" "$st_failed" "$ELAPSED" <<'PY'
import json, sys, urllib.parse
from collections import Counter

out, seed_sku, shopper, cap, before, after, st_failed, elapsed = sys.argv[1:]
before, after, cap = json.loads(before), json.loads(after), int(cap)
total, statuses, per_op, per_pass, five = 0, Counter(), Counter(), Counter(), []
created, replays, anon_not_4xx, bad_201 = {}, 0, [], []
for name in ("shopper", "warmup", "anonymous"):
    try:
        entries = json.load(open(f"{out}/{name}.har"))["log"]["entries"]
    except (OSError, ValueError, KeyError) as e:
        print(f"fuzz-http-edge: no usable HAR for pass {name}: {e}", file=sys.stderr)
        sys.exit(1)
    for e in entries:
        req, resp = e["request"], e["response"]
        status = int(resp["status"])
        path = urllib.parse.urlsplit(req["url"]).path
        total += 1
        per_pass[name] += 1
        statuses[status // 100 * 100] += 1
        op = "/v1/skus/{sku}" if path.startswith("/v1/skus/") else path
        per_op[f'{req["method"]} {op}'] += 1
        if status >= 500:
            hdrs = {h["name"]: h["value"] for h in req.get("headers", [])}
            body = (req.get("postData") or {}).get("text", "")
            five.append(f'{name}: {req["method"]} {req["url"]} headers={hdrs} body={body[:300]!r} -> '
                        f'{status} {(resp.get("content") or {}).get("text", "")[:300]!r}')
        if req["method"] == "POST" and path == "/v1/purchases":
            if name == "anonymous" and not 400 <= status < 500:
                anon_not_4xx.append(f'{req["url"]} -> {status}')
            if status == 201:
                rh = {h["name"].lower(): h["value"] for h in resp.get("headers", [])}
                try:
                    body = json.loads((resp.get("content") or {}).get("text", ""))
                    oid = body["order_id"]
                except (ValueError, KeyError, TypeError) as err:
                    bad_201.append(f"201 without a readable order_id: {err}")
                    continue
                if rh.get("idempotent-replayed", "").lower() == "true":
                    replays += 1
                else:
                    if oid in created:
                        bad_201.append(f"order {oid} answered 201 twice without Idempotent-Replayed")
                    created[oid] = (body.get("sku"), body.get("user"), body.get("qty"))

in_db = open(f"{out}/skus-in-db.txt").read().split()
orders = {}
for line in open(f"{out}/orders-in-db.txt").read().splitlines():
    oid, sku, user, qty = line.split(" ")
    orders[oid] = (sku, user, int(qty))

problems = list(bad_201)
if in_db != [seed_sku]:
    problems.append(f"SKUs in the database: {in_db[:10]} (want only the seed)")
if set(orders) != set(created):
    problems.append(f"orders in the database {sorted(orders)[:5]} != non-replayed 201s {sorted(created)[:5]}")
for oid, (sku, user, qty) in orders.items():
    if (sku, user) != (seed_sku, shopper):
        problems.append(f"order {oid} is ({sku}, {user}), not the shopper's of the seed")
    if oid in created and created[oid] != (sku, user, qty):
        problems.append(f"order {oid} in the database {(sku, user, qty)} != its 201 {created[oid]}")
units = sum(q for _, _, q in orders.values())
if units > cap:
    problems.append(f"{units} units sold to one shopper, above the cap {cap}")
if before["stock"] - after["stock"] != units:
    problems.append(f"seed stock {before['stock']} -> {after['stock']} but {units} units ordered")
if {k: v for k, v in before.items() if k != "stock"} != {k: v for k, v in after.items() if k != "stock"}:
    problems.append(f"seeded SKU changed beyond its stock: {before} -> {after}")
if anon_not_4xx:
    problems.append(f"anonymous purchases not refused with a 4xx: {anon_not_4xx[:5]}")
for line in five[:20]:
    print(f"fuzz-http-edge: 5xx: {line}", file=sys.stderr)
for p in problems:
    print(f"fuzz-http-edge: STATE: {p}", file=sys.stderr)
print("fuzz-http-edge: per pass: " + ", ".join(f"{k}={v}" for k, v in per_pass.items()), file=sys.stderr)
print("fuzz-http-edge: per operation: " + ", ".join(f"{k}={v}" for k, v in sorted(per_op.items())), file=sys.stderr)
print("fuzz-http-edge: by status class: " + ", ".join(f"{k // 100}xx={v}" for k, v in sorted(statuses.items())), file=sys.stderr)
state = "consistent" if not problems else "INCONSISTENT"
print(
    f"fuzz-http-edge summary: {total} requests in {elapsed} s, {len(five)} 5xx; "
    f"{len(created)} purchases answered 201 (+{replays} replays), {len(orders)} orders, "
    f"seed stock {before['stock']} -> {after['stock']}; anonymous purchases all refused={not anon_not_4xx}; "
    f"books {state}"
)
sys.exit(1 if five or problems or st_failed != "0" else 0)
PY
