#!/usr/bin/env bash
# The supply chain of the Rust workspace, checked by cargo-deny against deny.toml, offline:
# licences (permissive only), bans (no second TLS or crypto stack; duplicate versions shown as
# warnings; no wildcard versions) and sources (crates.io only). Run by scripts/test.sh.
#
#   bash scripts/deny.sh          the offline checks (installs cargo-deny into .tools/ when missing)
#   bash scripts/deny.sh --install-only
#
# cargo-deny is pinned (CARGO_DENY_VERSION below) and built from crates.io with
# `cargo install --locked` the first time: about 2 minutes of CPU on 2 cores (6 min wall clock on
# a busy shared machine; docs/development.md). The crates of every target in Cargo.lock are
# fetched first (`cargo fetch`, crates.io only), so that `cargo deny --offline` reads the whole
# graph, the edge's wasm32 crates included; the advisory database is not fetched (no git host
# is reachable from CI): `cargo deny check advisories` by hand where it is.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARGO_DENY_VERSION=0.20.2

log() { printf '[deny] %s\n' "$*" >&2; }

installed=$("$ROOT/.tools/bin/cargo-deny" --version 2>/dev/null | awk '{ print $2 }' || true)
if [[ $installed != "$CARGO_DENY_VERSION" ]]; then
    log "installing cargo-deny $CARGO_DENY_VERSION into .tools (cargo install --locked; ~2 min of CPU once)"
    started=$SECONDS
    cargo install --locked cargo-deny --version "$CARGO_DENY_VERSION" --root "$ROOT/.tools" --force
    log "installed cargo-deny $CARGO_DENY_VERSION in $((SECONDS - started)) s"
fi
if [[ ${1:-} == --install-only ]]; then
    exit 0
fi

cargo fetch --locked
"$ROOT/.tools/bin/cargo-deny" --offline --locked check licenses bans sources
