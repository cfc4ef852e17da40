#!/usr/bin/env bash
# The origin's SQL is checked at compile time (`sqlx::query!` in origin/src/store*): builds read
# the queries' descriptions from origin/.sqlx/ (SQLX_OFFLINE=true, .cargo/config.toml), never a
# live database. This script regenerates origin/.sqlx/ with `cargo sqlx prepare` against a scratch
# database migrated from origin/migrations/ — run it after changing a query or a migration and
# commit the result. With --check (scripts/test.sh) it changes nothing and fails when .sqlx/ is
# not current: a query without its description, a description that differs (the schema changed),
# or a description no query uses.
#
# Needs Postgres at DATABASE_URL's server (default 127.0.0.1:5432, see scripts/services.sh);
# installs sqlx-cli, pinned to the workspace's sqlx, with `cargo install` when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

check=()
case "${1:-}" in
  --check) check=(--check) ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# Same version as `sqlx` in Cargo.lock.
sqlx_version=$(awk '/^name = "sqlx"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
if [[ "$(sqlx --version 2>/dev/null)" != "sqlx-cli $sqlx_version" ]]; then
  echo "[sqlx-prepare] installing sqlx-cli $sqlx_version (cargo install, a few minutes once)"
  cargo install sqlx-cli --version "$sqlx_version" --locked \
    --no-default-features --features postgres,rustls
fi

# A scratch database of its own on DATABASE_URL's server, dropped on exit.
server=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
params=""
[[ "$server" == *\?* ]] && params="?${server#*\?}"
base=${server%%\?*}
export DATABASE_URL="${base%/*}/flashgate_sqlx_$$${params}"
trap 'sqlx database drop -y -f >/dev/null 2>&1 || true' EXIT
sqlx database create
sqlx migrate run --source origin/migrations >/dev/null

(cd origin && cargo sqlx prepare "${check[@]}" -- --all-targets --locked)

if ((${#check[@]})); then
  # `prepare --check` only warns about descriptions no query uses; they would go stale unseen.
  regenerated=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/sqlx-prepare-check
  unused=$(comm -23 <(ls origin/.sqlx | sort) <(ls "$regenerated" | sort))
  if [[ -n "$unused" ]]; then
    echo "[sqlx-prepare] origin/.sqlx/ has descriptions no query uses (run scripts/sqlx-prepare.sh):" >&2
    echo "$unused" >&2
    exit 1
  fi
  echo "[sqlx-prepare] origin/.sqlx/ is current"
fi
