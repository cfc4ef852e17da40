#!/usr/bin/env bash
# Installs the pinned edge toolchain, offline-safe and idempotent:
#   - the wasm32-unknown-unknown Rust target;
#   - worker-build 0.8.7 and wasm-bindgen-cli (exactly the wasm-bindgen version in Cargo.lock)
#     into .tools/bin;
#   - wrangler 4.86.0, binaryen 132.0.0 (wasm-opt) and esbuild 0.28.2 from package-lock.json.
# Nothing is downloaded from outside the package registries (crates.io, npm).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=$ROOT/.tools
WORKER_BUILD_VERSION=0.8.7

log() { printf '[edge-toolchain] %s\n' "$*" >&2; }

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    log "adding the wasm32-unknown-unknown target"
    rustup target add wasm32-unknown-unknown
fi

# The CLI must match the wasm-bindgen crate in Cargo.lock exactly.
WASM_BINDGEN_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
if [[ -z "$WASM_BINDGEN_VERSION" ]]; then
    log "no wasm-bindgen in Cargo.lock; run 'cargo metadata' or a build first"
    exit 1
fi

installed_version() { # <binary> -> its version, or nothing
    [[ -x "$TOOLS/bin/$1" ]] && "$TOOLS/bin/$1" --version 2>/dev/null | awk '{ print $NF }' || true
}

if [[ "$(installed_version worker-build)" != "$WORKER_BUILD_VERSION" ]]; then
    log "installing worker-build $WORKER_BUILD_VERSION into .tools (takes ~4 min on 2 cores)"
    cargo install worker-build --version "$WORKER_BUILD_VERSION" --locked --root "$TOOLS"
fi

if [[ "$(installed_version wasm-bindgen)" != "$WASM_BINDGEN_VERSION" ]]; then
    # No --locked: one of the CLI's locked dependencies is not in the reachable index.
    log "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION into .tools (takes ~2.5 min on 2 cores)"
    cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --root "$TOOLS" --force
fi

lock_hash=$(sha256sum package-lock.json | cut -d' ' -f1)
if [[ ! -f node_modules/.flashgate-lock-hash || "$(cat node_modules/.flashgate-lock-hash)" != "$lock_hash" ]]; then
    log "npm ci (wrangler, binaryen, esbuild)"
    npm ci --no-audit --no-fund
    echo "$lock_hash" > node_modules/.flashgate-lock-hash
fi

log "ready: worker-build $(installed_version worker-build), wasm-bindgen $(installed_version wasm-bindgen), wrangler $(node_modules/.bin/wrangler --version 2>/dev/null | tail -1)"
