#!/usr/bin/env bash
# Builds the edge worker and serves it in workerd with `wrangler dev` on 127.0.0.1:8787
# (EDGE_PORT to change), in front of the origin at ORIGIN_URL (default http://$LISTEN_ADDR, i.e.
# the origin scripts/dev-up.sh starts). Used by scripts/dev-up.sh; runs in the foreground.
#
# Secrets come from the environment when set (SESSION_SECRET, EDGE_SHARED_SECRET, ADMIN_TOKEN —
# dev-up.sh exports them), else from .dev.vars (copy .dev.vars.example).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/edge-toolchain.sh
bash scripts/edge-build.sh --wasm-only

args=(
    dev
    --config edge/build/wrangler.toml
    --ip 127.0.0.1
    --port "${EDGE_PORT:-8787}"
    --show-interactive-dev-session=false
)
if [[ -f .dev.vars ]]; then
    args+=(--env-file .dev.vars)
fi
origin_url=${ORIGIN_URL:-http://${LISTEN_ADDR:-127.0.0.1:8080}}
args+=(--var "ORIGIN_URL:$origin_url")
for name in SESSION_SECRET EDGE_SHARED_SECRET ADMIN_TOKEN; do
    if [[ -n ${!name:-} ]]; then
        args+=(--var "$name:${!name}")
    fi
done

echo "edge: http://127.0.0.1:${EDGE_PORT:-8787} -> origin $origin_url" >&2
export WRANGLER_SEND_METRICS=false
exec node_modules/.bin/wrangler "${args[@]}"
