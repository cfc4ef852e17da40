#!/usr/bin/env bash
# Makes sure the Rust toolchain rust-toolchain.toml names (its `channel`, e.g. 1.95.0) resolves
# here without a download, so that every cargo call in this repository uses it. Run first by
# scripts/test.sh and scripts/dev-up.sh; idempotent, silent and instant when it is installed.
#
# rustup knows a toolchain by the name it was installed under: a machine whose only toolchain is
# `stable` (today that very 1.95.0) does not have "1.95.0", and rustup would download it again —
# or refuse, with RUSTUP_AUTO_INSTALL=0, or fail, on a machine that reaches no toolchain server.
# So when the machine's default toolchain is exactly the pinned release, it is made known under
# the pinned name too (a link in $RUSTUP_HOME/toolchains, as rustup's own layout has it; `rustup
# toolchain link` refuses names that look like releases). Otherwise the pinned release is
# installed with rustup (needs its server).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[rust-toolchain] %s\n' "$*" >&2; }

want=$(sed -n 's/^channel *= *"\([^"]*\)".*/\1/p' rust-toolchain.toml)
if [[ -z $want ]]; then
    log "rust-toolchain.toml names no channel"
    exit 1
fi
if ! command -v rustup >/dev/null 2>&1; then
    # A toolchain without rustup (a distribution's cargo, a container): it must be the pinned one.
    have=$(rustc --version | awk '{ print $2 }')
    [[ $have == "$want" ]] || log "warning: rustc $have is not the pinned $want (no rustup to switch)"
    exit 0
fi
host=$(cd / && rustc -vV | sed -n 's/^host: //p')
if rustup toolchain list | awk '{ print $1 }' | grep -qx "$want-$host"; then
    exit 0
fi

# Outside the repository (no override), the default toolchain answers.
default_version=$(cd / && rustc --version | awk '{ print $2 }')
if [[ $default_version == "$want" ]]; then
    sysroot=$(cd / && rustc --print sysroot)
    toolchains=${RUSTUP_HOME:-$HOME/.rustup}/toolchains
    log "the default toolchain ($sysroot) is Rust $want: known as $want-$host from now on"
    ln -s "$sysroot" "$toolchains/$want-$host"
else
    log "installing Rust $want (rust-toolchain.toml; the default toolchain here is $default_version)"
    rustup toolchain install "$want" --profile minimal --component clippy,rustfmt
fi
rustup toolchain list | awk '{ print $1 }' | grep -qx "$want-$host" || {
    log "Rust $want is still not installed"
    exit 1
}
