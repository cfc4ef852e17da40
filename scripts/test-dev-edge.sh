#!/usr/bin/env bash
# The README's two commands side by side: the tests must not take down a running
# scripts/dev-up.sh. The tests rebuild edge/build/; the dev stack's `wrangler dev` used to serve
# those very files, reloaded when they changed (once deadlocking esbuild: wrangler exited and
# dev-up.sh stopped the stack). This starts the dev edge exactly as dev-up.sh does
# (scripts/edge-dev.sh, on a free port), rebuilds edge/build/ as the tests do, and checks that
# the files really changed, that the dev edge neither reloaded nor exited, and that it still
# answers. Run by scripts/test-edge.sh after the edge build (so both builds are incremental:
# well under a minute). Needs the edge toolchain (scripts/edge-toolchain.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[test-dev-edge] %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; log "the dev edge's output:"; sed 's/^/    /' "$out" >&2; exit 1; }

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
out=$(mktemp)
healthz() { curl -s -o /dev/null -m 5 -w '%{http_code}' "http://127.0.0.1:$port/healthz" || true; }

# Its own process group, so that stopping it stops wrangler and workerd too.
set -m
# The development secrets dev-up.sh exports; the origin is not needed for /healthz.
EDGE_PORT=$port LISTEN_ADDR=127.0.0.1:1 \
    EDGE_SHARED_SECRET=dev-edge-shared-secret-change-me ADMIN_TOKEN=dev-admin-token-change-me \
    SESSION_SECRET=dev-session-secret-change-me \
    bash scripts/edge-dev.sh >"$out" 2>&1 &
dev=$!
set +m
trap 'kill -TERM -- "-$dev" 2>/dev/null || true; wait "$dev" 2>/dev/null || true; rm -f "$out"' EXIT

started=$SECONDS
until [[ $(healthz) == 200 ]]; do
    kill -0 "$dev" 2>/dev/null || fail "the dev edge exited before it answered"
    ((SECONDS - started < 300)) || fail "the dev edge did not answer within 300 s"
    sleep 1
done
log "the dev edge answers on :$port after $((SECONDS - started)) s; rebuilding edge/build/ as the tests do"
served_before=$(wc -l <"$out")
wasm_before=$(stat -c %Y.%s edge/build/index_bg.wasm)

bash scripts/edge-build.sh --wasm-only >/dev/null 2>&1 || fail "the rebuild failed"
[[ $(stat -c %Y.%s edge/build/index_bg.wasm) != "$wasm_before" ]] \
    || fail "the rebuild did not rewrite edge/build/index_bg.wasm: this check would prove nothing"

# wrangler notices a change within a second; give it three.
for _ in 1 2 3; do
    sleep 1
    kill -0 "$dev" 2>/dev/null || fail "the dev edge exited after edge/build/ was rebuilt"
    [[ $(healthz) == 200 ]] || fail "the dev edge stopped answering after edge/build/ was rebuilt"
done
if tail -n +"$((served_before + 1))" "$out" | grep -q 'Reloading'; then
    fail "the dev edge reloaded when edge/build/ was rebuilt (it must serve its own copy)"
fi
log "ok: edge/build/ rebuilt, the dev edge neither reloaded nor exited, and answers"
