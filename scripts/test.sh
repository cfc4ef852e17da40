#!/usr/bin/env bash
# Runs every check and test of Flashgate. This is the command README.md and .ci/run name.
# It installs or starts what the tests need: the pinned Rust (scripts/rust-toolchain.sh), OS
# packages, Postgres and Redis (scripts/services.sh, apt-get on a fresh machine), the wasm target,
# the edge toolchain, cargo-deny, the Python tools.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/rust-toolchain.sh
bash scripts/services.sh --test-tools
# Loopback: no TLS (see .cargo/config.toml).
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
# SQL is checked against origin/.sqlx/, whatever the environment says (see .cargo/config.toml).
export SQLX_OFFLINE=true

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== supply chain: licences, bans, sources (cargo-deny against deny.toml, offline)"
bash scripts/deny.sh

echo "== no import circle between the files or the modules of any crate (xtask/)"
cargo xtask circles

echo "== SQL checked at compile time: origin/.sqlx/ matches the queries and the migrations"
bash scripts/sqlx-prepare.sh --check

echo "== shared builds for wasm32"
rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || true
cargo build -p shared --target wasm32-unknown-unknown --locked

echo "== deployment files (Compose Specification schema, Dockerfiles, Prometheus rules)"
bash scripts/check-deploy.sh

echo "== scripts/services.sh on a machine without the services (private namespaces)"
bash scripts/test-services.sh

echo "== workspace tests (real Postgres and redis-server)"
cargo test --workspace --locked

echo "== HTTP fuzzing of the origin from its OpenAPI description (schemathesis: no 5xx, state unchanged)"
FUZZ_HTTP_MAX_EXAMPLES=${FUZZ_HTTP_MAX_EXAMPLES:-100} bash scripts/fuzz-http.sh

if [[ -x scripts/test-edge.sh ]]; then
  echo "== edge: build in workerd and end-to-end tests against the real origin"
  bash scripts/test-edge.sh
fi
