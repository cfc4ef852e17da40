#!/usr/bin/env bash
# The edge's checks: native policy tests, the offline worker build with its size gate, the dev
# edge beside a rebuild (scripts/test-dev-edge.sh), then the end-to-end suite — the BUILT worker in workerd (wrangler dev on a free port, fresh state) in
# front of the REAL origin (fresh Postgres database, Redis on 127.0.0.1:6379) — including the
# sale page's browser suite (edge/e2e/browser/: Debian's headless chromium, installed by
# services.sh --test-tools, driven by puppeteer-core; screenshots in $SALE_PAGE_ARTIFACTS).
#
#   scripts/test-edge.sh            everything
#   E2E_KEEP=1 scripts/test-edge.sh keep the run's temp dir (wrangler/origin logs, DO state)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/services.sh --test-tools
bash scripts/edge-toolchain.sh

echo "== edge: the sale page's solver bundle is fresh (altcha-lib as pinned; regenerate: bash scripts/sale-worker-bundle.sh)"
bash scripts/sale-worker-bundle.sh --check

echo "== edge: native policy tests"
cargo test -p edge --locked

echo "== edge: worker build (offline) and upload size gate"
bash scripts/edge-build.sh

echo "== edge: the dev stack's edge (scripts/edge-dev.sh) survives a rebuild of edge/build/ (scripts/dev-up.sh beside scripts/test.sh)"
bash scripts/test-dev-edge.sh

echo "== edge: origin binary"
cargo build -p origin --locked

echo "== edge: end-to-end in workerd against the real origin (edge/e2e/, with the browser suite in edge/e2e/browser/)"
export SALE_PAGE_ARTIFACTS=${SALE_PAGE_ARTIFACTS:-$PWD/target/sale-page}
node --test --test-reporter=spec edge/e2e/
