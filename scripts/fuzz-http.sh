#!/usr/bin/env bash
# HTTP fuzzing of the origin from its own OpenAPI description, with schemathesis, on loopback only.
#
#   bash scripts/fuzz-http.sh
#
# Environment (all optional):
#   FUZZ_HTTP_MAX_EXAMPLES  generated cases per operation and phase      (default 300)
#   FUZZ_HTTP_TIMEOUT       hard limit in seconds for each schemathesis pass (default 600)
#   FUZZ_HTTP_SEED          schemathesis seed, to replay a run           (default: random)
#
# Steps: installs schemathesis (pinned) into .tools/venv when missing; makes sure Postgres and
# Redis run (scripts/services.sh); creates a fresh database; builds and starts target/debug/origin
# on a free 127.0.0.1 port with a unique Redis key prefix; seeds one SKU; runs schemathesis against
# the live GET /openapi.json in three passes — the admin endpoint alone with the admin bearer token
# (so PUT /v1/admin/skus/{sku} is exercised past auth), every operation with the token, every
# operation without credentials — with the `not_a_server_error` check.
# Then it checks that rejected requests changed nothing: the seeded SKU is unchanged, there is no
# order, no idempotency record and no payment event (every unsigned purchase and webhook — the
# origin runs with PAYMENT_WEBHOOK_SECRETS set — must be refused with a 4xx), no SKU's
# stock differs from its initial stock, and the SKUs in the database are exactly the seed plus
# those whose PUT was answered 200. Prints one summary line; exits non-zero on any 5xx or
# changed state. The origin is stopped, the database dropped and the Redis keys deleted on exit.
# Reports (HAR files, schemathesis output, origin log) stay in target/fuzz-http/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

SCHEMATHESIS_VERSION=4.32.5
MAX_EXAMPLES=${FUZZ_HTTP_MAX_EXAMPLES:-300}
PASS_TIMEOUT=${FUZZ_HTTP_TIMEOUT:-600}
VENV=.tools/venv
OUT=target/fuzz-http
PSQL=(psql -h 127.0.0.1 -U postgres -v ON_ERROR_STOP=1 -qAt)

log() { echo "fuzz-http: $*" >&2; }

# --- tools and services ---------------------------------------------------------------------
if [[ ! -x $VENV/bin/python ]]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
if [[ "$("$VENV/bin/schemathesis" --version 2>/dev/null | awk '{ print $NF }')" != "$SCHEMATHESIS_VERSION" ]]; then
  log "installing schemathesis $SCHEMATHESIS_VERSION into $VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi
bash scripts/services.sh

log "building the origin"
cargo build -p origin --locked --quiet

# --- a fresh database, a unique prefix, a free port ---------------------------------------------
RUN_ID="$(date +%s)_$$_$RANDOM"
DB="flashgate_fuzz_$RUN_ID"
PREFIX="fuzzhttp_$RUN_ID"
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
BASE="http://127.0.0.1:$PORT"
ADMIN_TOKEN="fuzz-admin-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
EDGE_SHARED_SECRET="fuzz-edge-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
PAYMENT_WEBHOOK_SECRET="whsec_fuzz_$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
SEED_SKU="fuzz-seed-$RANDOM"
SEED_STOCK=25
ORIGIN_PID=""

rm -rf "$OUT"
mkdir -p "$OUT"

cleanup() {
  local rc=$?
  if [[ -n $ORIGIN_PID ]] && kill -0 "$ORIGIN_PID" 2>/dev/null; then
    kill -TERM "$ORIGIN_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$ORIGIN_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$ORIGIN_PID" 2>/dev/null || true
    wait "$ORIGIN_PID" 2>/dev/null || true
  fi
  "${PSQL[@]}" -d postgres -c "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" >/dev/null 2>&1 ||
    log "could not drop database $DB"
  redis-cli -h 127.0.0.1 -p 6379 --scan --pattern "${PREFIX}*" 2>/dev/null |
    xargs -r redis-cli -h 127.0.0.1 -p 6379 del >/dev/null 2>&1 || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"${PSQL[@]}" -d postgres -c "CREATE DATABASE \"$DB\""
log "database $DB, origin on $BASE, redis prefix $PREFIX"

DATABASE_URL="postgres://postgres@127.0.0.1:5432/$DB" \
  REDIS_URLS="redis://127.0.0.1:6379" \
  REDIS_KEY_PREFIX="$PREFIX" \
  LISTEN_ADDR="127.0.0.1:$PORT" \
  EDGE_SHARED_SECRET="$EDGE_SHARED_SECRET" EDGE_SHARED_SECRETS= \
  ADMIN_TOKEN="$ADMIN_TOKEN" ADMIN_TOKENS= \
  PAYMENT_WEBHOOK_SECRETS="$PAYMENT_WEBHOOK_SECRET" \
  RUST_LOG="${RUST_LOG:-warn}" \
  target/debug/origin >"$OUT/origin.log" 2>&1 &
ORIGIN_PID=$!

ready=""
for _ in $(seq 1 150); do
  if ! kill -0 "$ORIGIN_PID" 2>/dev/null; then
    log "the origin exited; its log:"; tail -n 30 "$OUT/origin.log" >&2; exit 1
  fi
  if [[ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/readyz")" == 200 ]]; then ready=1; break; fi
  sleep 0.2
done
[[ -n $ready ]] || { log "GET /readyz never answered 200"; exit 1; }

# --- seed --------------------------------------------------------------------------------------
code=$(curl -s -o "$OUT/seed.json" -w '%{http_code}' -X PUT "$BASE/v1/admin/skus/$SEED_SKU" \
  -H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \
  --data "{\"name\":\"Fuzz seed\",\"price_cents\":1999,\"stock\":$SEED_STOCK,\"max_per_user\":2}")
[[ $code == 200 ]] || { log "seeding $SEED_SKU answered $code"; exit 1; }
SEED_BEFORE=$(curl -s "$BASE/v1/skus/$SEED_SKU")

# --- schemathesis ------------------------------------------------------------------------------
# The schema says only "1..=64 of [A-Za-z0-9._-]" for {sku}, so most generated SKUs are refused
# before the body is looked at, and gives no bounds for the admin amounts. Dictionaries steer part
# of the cases to valid values: fresh SKUs and in-range amounts for the admin PUTs (so generated
# names reach the database), the seed SKU for the anonymous pass and for purchase bodies (whose
# refusals must leave it untouched). The rest of each value is generated freely.
# No persistent schemathesis state (it would otherwise write .schemathesis/ into the work tree).
cat >"$OUT/admin.toml" <<EOF
[cache]
enabled = false
[dictionaries.skus]
values = ["fuzz-put-1", "fuzz-put-2", "A", "a.b_c-9", "$(printf 'Z%.0s' {1..64})"]
[dictionaries.seed]
values = ["$SEED_SKU"]
[dictionaries.names]
values = ["Shoe", "Ünïcødé ☃ name", "$(printf 'n%.0s' {1..200})"]
[dictionaries.amounts]
values = [0, 1, 1999, 1000000000000]
[dictionaries.caps]
values = [1, 2, 2147483647]
[parameters]
"path.sku" = { dictionary = "skus", probability = 0.6 }
"body.sku" = { dictionary = "seed", probability = 0.6 }
"body.name" = { dictionary = "names", probability = 0.3 }
"body.price_cents" = { dictionary = "amounts", probability = 0.6 }
"body.stock" = { dictionary = "amounts", probability = 0.6 }
"body.max_per_user" = { dictionary = "caps", probability = 0.6 }
EOF
cat >"$OUT/anonymous.toml" <<EOF
[cache]
enabled = false
[dictionaries.seed]
values = ["$SEED_SKU"]
[parameters]
"path.sku" = { dictionary = "seed", probability = 0.6 }
"body.sku" = { dictionary = "seed", probability = 0.6 }
EOF

run_pass() { # name, extra args...
  local name=$1; shift
  local seed_args=()
  [[ -n ${FUZZ_HTTP_SEED:-} ]] && seed_args=(--seed "$FUZZ_HTTP_SEED")
  log "schemathesis pass '$name' (max $MAX_EXAMPLES examples per operation, ${PASS_TIMEOUT}s limit)"
  set +e
  # Run from $OUT, so nothing schemathesis writes lands in the work tree. One worker: with two
  # threads, CPython 3.11's `ast` module (which Hypothesis calls to describe its lambdas) now and
  # then fails with "SystemError: AST constructor recursion depth mismatch" (its recursion counter
  # is per interpreter; CPython gh-106905) — a crash of the tool, not an answer of the origin.
  (cd "$OUT" && timeout --signal=INT --kill-after=30 "$PASS_TIMEOUT" \
    "$ROOT/$VENV/bin/schemathesis" --config-file "$name.toml" run "$BASE/openapi.json" \
    --url "$BASE" \
    --checks not_a_server_error \
    --max-examples "$MAX_EXAMPLES" \
    --workers 1 \
    --request-timeout 10 \
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

# Pass "admin": the admin endpoint alone (sharing one pass with the others, it gets only a fraction
# of the examples), with the token. Pass "all": every operation, with the token too. Pass
# "anonymous": every operation without credentials.
cp "$OUT/admin.toml" "$OUT/all.toml"
st_failed=0
run_pass admin -H "Authorization: Bearer $ADMIN_TOKEN" \
  --include-method PUT --include-path-regex '^/v1/admin/' || st_failed=1
run_pass all -H "Authorization: Bearer $ADMIN_TOKEN" || st_failed=1
run_pass anonymous || st_failed=1

# --- state after the run ------------------------------------------------------------------------
SEED_AFTER=$(curl -s "$BASE/v1/skus/$SEED_SKU")
ORDERS=$("${PSQL[@]}" -d "$DB" -c "SELECT count(*) FROM orders")
RECORDS=$("${PSQL[@]}" -d "$DB" -c "SELECT count(*) FROM idempotency_records")
MOVED=$("${PSQL[@]}" -d "$DB" -c "SELECT count(*) FROM skus WHERE stock <> initial_stock")
EVENTS=$("${PSQL[@]}" -d "$DB" -c "SELECT count(*) FROM payment_events")
"${PSQL[@]}" -d "$DB" -c "SELECT sku FROM skus ORDER BY sku" >"$OUT/skus-in-db.txt"

"$VENV/bin/python" - "$OUT" "$SEED_SKU" "$SEED_BEFORE" "$SEED_AFTER" "$ORDERS" "$RECORDS" "$MOVED" "$st_failed" "$EVENTS" <<'PY'
import json, sys, urllib.parse
from collections import Counter

out, seed_sku, before, after, orders, records, moved, st_failed, events = sys.argv[1:]
total, statuses, per_op, created, five = 0, Counter(), Counter(), set(), []
admin_ok, purchases, purchases_not_4xx = 0, 0, []
for name in ("admin", "all", "anonymous"):
    try:
        entries = json.load(open(f"{out}/{name}.har"))["log"]["entries"]
    except (OSError, ValueError, KeyError) as e:
        print(f"fuzz-http: no usable HAR for pass {name}: {e}", file=sys.stderr)
        sys.exit(1)
    for e in entries:
        req, status = e["request"], int(e["response"]["status"])
        path = urllib.parse.urlsplit(req["url"]).path
        total += 1
        statuses[status // 100 * 100] += 1
        op = path if not path.startswith(("/v1/skus/", "/v1/admin/skus/")) else path.rsplit("/", 1)[0] + "/{sku}"
        per_op[f'{req["method"]} {op}'] += 1
        if status >= 500:
            five.append(f'{req["method"]} {req["url"]} -> {status}')
        if req["method"] == "PUT" and path.startswith("/v1/admin/skus/") and 200 <= status < 300:
            admin_ok += 1
            created.add(urllib.parse.unquote(path.rsplit("/", 1)[1]))
        if req["method"] == "POST" and path == "/v1/purchases":
            purchases += 1
            if not 400 <= status < 500:
                purchases_not_4xx.append(f'{req["url"]} -> {status}')

in_db = set(open(f"{out}/skus-in-db.txt").read().split())
problems = []
if before != after:
    problems.append(f"seeded SKU changed: {before} -> {after}")
if orders != "0":
    problems.append(f"{orders} orders exist (no purchase was signed)")
if records != "0":
    problems.append(f"{records} idempotency records exist")
if events != "0":
    problems.append(f"{events} payment events recorded (no webhook was signed)")
if moved != "0":
    problems.append(f"{moved} SKUs have stock != initial_stock")
unexpected = in_db - created - {seed_sku}
if purchases_not_4xx:
    problems.append(f"unsigned purchases not refused with a 4xx: {purchases_not_4xx[:5]}")
if unexpected:
    problems.append(f"SKUs in the database without a 2xx PUT: {sorted(unexpected)[:10]}")
for line in five[:20]:
    print(f"fuzz-http: 5xx: {line}", file=sys.stderr)
for p in problems:
    print(f"fuzz-http: STATE: {p}", file=sys.stderr)
print("fuzz-http: per operation: " + ", ".join(f"{k}={v}" for k, v in sorted(per_op.items())), file=sys.stderr)
print("fuzz-http: by status class: " + ", ".join(f"{k // 100}xx={v}" for k, v in sorted(statuses.items())), file=sys.stderr)
state = "unchanged by rejected requests" if not problems else "CHANGED"
print(
    f"fuzz-http summary: {total} requests, {len(five)} 5xx; {admin_ok} admin PUTs accepted ({len(created)} SKUs), "
    f"{purchases} unsigned purchases all refused={not purchases_not_4xx}; seed unchanged={before == after}, "
    f"orders={orders}, idempotency records={records}; state {state}"
)
sys.exit(1 if five or problems or st_failed != "0" else 0)
PY
