#!/usr/bin/env bash
# Builds the edge worker and serves it in workerd with `wrangler dev` on 127.0.0.1:8787
# (EDGE_PORT to change), in front of the origin at ORIGIN_URL (default http://$LISTEN_ADDR, i.e.
# the origin scripts/dev-up.sh starts). Used by scripts/dev-up.sh; runs in the foreground.
#
# It serves its own copy of the build (.local/edge-dev/build/), not edge/build/: `wrangler dev`
# reloads whenever the files it serves change, and the tests (scripts/test.sh) rebuild
# edge/build/ — a reload once deadlocked wrangler's esbuild, wrangler exited and dev-up.sh
# stopped the whole stack. So the tests can run beside the dev stack (scripts/test-dev-edge.sh
# proves it); to serve a new build, restart this script (or scripts/dev-up.sh). Durable Object
# and cache state persist in .local/edge-dev/state/ across restarts.
#
# Secrets come from the environment when set (SESSION_SECRET(S), EDGE_SHARED_SECRET(S),
# ADMIN_TOKEN(S), ROOM_SECRET(S), POW_SECRET(S) — dev-up.sh exports them), else from .dev.vars (copy .dev.vars.example). When the
# environment sets either form of a secret, both forms are passed (the other one empty = unset), so
# a different form in .dev.vars cannot conflict with it.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/edge-toolchain.sh
bash scripts/edge-build.sh --wasm-only

serve=.local/edge-dev
(
    flock 9 # edge-build.sh's lock: not while a build writes edge/build/
    rm -rf "$serve/build"
    mkdir -p "$serve/build"
    for entry in edge/build/* edge/build/.gitignore; do
        [[ -e $entry ]] && cp -a "$entry" "$serve/build/"
    done
) 9>.local/edge-build.lock

args=(
    dev
    --config "$serve/build/wrangler.toml"
    --persist-to "$serve/state"
    --ip 127.0.0.1
    --port "${EDGE_PORT:-8787}"
    --show-interactive-dev-session=false
)
if [[ -f .dev.vars ]]; then
    args+=(--env-file .dev.vars)
fi
origin_url=${ORIGIN_URL:-http://${LISTEN_ADDR:-127.0.0.1:8080}}
args+=(--var "ORIGIN_URL:$origin_url")
for pair in SESSION_SECRETS:SESSION_SECRET EDGE_SHARED_SECRETS:EDGE_SHARED_SECRET ADMIN_TOKENS:ADMIN_TOKEN \
    ROOM_SECRETS:ROOM_SECRET POW_SECRETS:POW_SECRET; do
    list=${pair%%:*}
    single=${pair##*:}
    if [[ -n ${!list:-} || -n ${!single:-} ]]; then
        args+=(--var "$list:${!list:-}" --var "$single:${!single:-}")
    fi
done

echo "edge: http://127.0.0.1:${EDGE_PORT:-8787} -> origin $origin_url" >&2
export WRANGLER_SEND_METRICS=false
exec node_modules/.bin/wrangler "${args[@]}"
