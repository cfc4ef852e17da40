#!/usr/bin/env bash
# Makes sure what the local stack and the tests need is installed and running, so that a fresh
# Debian/Ubuntu machine needs nothing but Rust and Node. Run by dev-up.sh and test.sh; safe to run
# on its own, idempotent, and silent and quick (well under a second) when everything is there.
#
#   bash scripts/services.sh [--test-tools] [--dry-run]
#
#   1. OS packages, installed with apt-get (after `apt-get update`) when missing: `postgresql`
#      (server and client: the tests start private servers from /usr/lib/postgresql/*/bin),
#      `redis-server` and `redis-tools`, `curl`; with --test-tools also `python3-venv` (the
#      deployment checks and the HTTP fuzzing run pinned Python tools from .tools/venv) and
#      `chromium` (Debian's headless browser, which the sale page's browser suite drives through
#      puppeteer-core: no browser is downloaded from anywhere else).
#   2. PostgreSQL answering on 127.0.0.1:5432: a cluster is created (pg_createcluster) when none
#      listens on that port and started when it is down. Its `postgres` role must log in over TCP
#      loopback without a password, as DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
#      (the tests, dev-up.sh) does. When it cannot, one `trust` rule for the role `postgres` from
#      127.0.0.1/32 and ::1/128 only is put at the top of the cluster's pg_hba.conf (marked with a
#      comment) and the configuration reloaded.
#   3. Redis answering on 127.0.0.1:6379: started (no persistence) when it is down.
#
# Every action is announced on stderr ("[services] ..."). --dry-run announces what would be done
# and changes nothing. Installing, creating or starting a cluster and editing pg_hba.conf need
# root: run as root, or the commands go through sudo.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TEST_TOOLS=""
DRY_RUN=""
for arg in "$@"; do
  case $arg in
    --test-tools) TEST_TOOLS=1 ;;
    --dry-run) DRY_RUN=1 ;;
    *) echo "usage: $0 [--test-tools] [--dry-run]" >&2; exit 2 ;;
  esac
done

# An environment naming a locale this machine does not have (common in containers) makes every
# Postgres tool warn, and pg_createcluster refuse; C.UTF-8 exists on every Debian/Ubuntu.
if locale 2>&1 | grep -q "Cannot set"; then
  export LC_ALL=C.UTF-8
fi

PG_PORT=5432
REDIS_PORT=6379
HBA_MARKER="flashgate scripts/services.sh"

log() { printf '[services] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }
# Runs a command as root: directly, or through sudo.
root_run() {
  if [[ $(id -u) == 0 ]]; then "$@"
  elif have sudo; then sudo "$@"
  else die "'$*' needs root: run this script as root or install sudo"
  fi
}
# Runs a command that changes the machine, as root; in a dry run only says what it would run.
as_root() {
  if [[ -n $DRY_RUN ]]; then log "would run: $*"; return 0; fi
  root_run "$@"
}
# Runs a command as the `postgres` OS user (the cluster owner; peer authentication on the socket).
as_postgres() {
  if [[ $(id -u) == 0 ]]; then (cd / && runuser -u postgres -- "$@")
  elif have sudo; then (cd / && sudo -u postgres "$@")
  else die "'$*' must run as the postgres user: run this script as root or install sudo"
  fi
}
# True when something accepts TCP connections on 127.0.0.1:<port> (needs no client tools).
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# The bin directory of the newest PostgreSQL server under /usr/lib/postgresql (Debian's layout,
# the one the tests look in), or nothing.
pg_server_bin() {
  local bin
  for bin in /usr/lib/postgresql/*/bin; do
    if [[ -x $bin/postgres && -x $bin/initdb ]]; then echo "$bin"; fi
  done | sort -V | tail -n 1
}
# psql and pg_isready that work (Debian's wrappers fail without a client version installed).
pg_client_ok() { have psql && have pg_isready && psql --version >/dev/null 2>&1; }
pg_ready() { have pg_isready && pg_isready -h 127.0.0.1 -p "$PG_PORT" -q 2>/dev/null; }
pg_login() { # the tests' login: role postgres over TCP loopback, no password, never prompt
  psql "postgres://postgres@127.0.0.1:$PG_PORT/postgres?sslmode=disable" -w -Atqc 'SELECT 1' 2>&1
}
redis_up() { have redis-cli && redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -qx PONG; }

# --- 1. OS packages ----------------------------------------------------------------------------
packages=()
reasons=()
want() { # <package> <why>
  packages+=("$1")
  reasons+=("$2")
}
if [[ -z $(pg_server_bin) ]]; then
  want postgresql "no PostgreSQL server in /usr/lib/postgresql"
elif ! pg_client_ok; then
  want postgresql-client "no psql/pg_isready"
fi
have redis-server || want redis-server "no redis-server"
have redis-cli || want redis-tools "no redis-cli"
have curl || want curl "no curl"
if [[ -n $TEST_TOOLS ]] && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  want python3-venv "no python3 with venv"
fi
if [[ -n $TEST_TOOLS ]] && ! have chromium; then
  want chromium "no chromium (the sale page's browser suite)"
fi

if (( ${#packages[@]} )); then
  summary=$(printf '%s; ' "${reasons[@]}")
  summary=${summary%; }
  have apt-get || die "missing: $summary. Install ${packages[*]} (or equivalents) with this machine's package manager; this script knows apt-get only"
  log "installing OS packages with apt-get: ${packages[*]} ($summary)"
  as_root apt-get update -qq
  # C.UTF-8 exists on every Debian/Ubuntu: the cluster the postgresql package creates gets UTF-8
  # even where the environment names a locale that is not generated.
  as_root env DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 LC_ALL=C.UTF-8 \
    apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  [[ -n $DRY_RUN ]] || log "installed: ${packages[*]}"
fi

# --- 2. PostgreSQL on 127.0.0.1:5432, role postgres without a password over loopback ------------
if ! pg_ready; then
  if port_open "$PG_PORT"; then
    if [[ -n $DRY_RUN ]] && ! pg_client_ok; then
      log "something listens on 127.0.0.1:$PG_PORT; would check that it is PostgreSQL once the client is installed"
    else # e.g. a server still starting up
      for _ in $(seq 1 100); do pg_ready && break; sleep 0.1; done
      pg_ready || die "something listens on 127.0.0.1:$PG_PORT but pg_isready says it is not a ready PostgreSQL"
    fi
  elif have pg_lsclusters; then
    # Debian's postgresql-common: the cluster on our port, else a new one.
    ver="" name=""
    read -r ver name < <(pg_lsclusters -h 2>/dev/null | awk -v p="$PG_PORT" '$3 == p { print $1, $2; exit }') || true
    if [[ -z $ver ]]; then
      bin=$(pg_server_bin)
      ver=$(basename "$(dirname "${bin:-/usr/lib/postgresql/<installed version>/bin}")")
      name=main
      [[ -e /etc/postgresql/$ver/$name ]] && name=flashgate # `main` exists, on another port
      log "creating PostgreSQL $ver cluster '$name' on port $PG_PORT (pg_createcluster, UTF-8)"
      as_root env LANG=C.UTF-8 LC_ALL=C.UTF-8 pg_createcluster --port "$PG_PORT" "$ver" "$name" >/dev/null
    fi
    log "starting PostgreSQL cluster $ver/$name on port $PG_PORT"
    if [[ -d /run/systemd/system ]]; then
      as_root pg_ctlcluster "$ver" "$name" start
    else
      as_root pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start
    fi
    if [[ -z $DRY_RUN ]]; then
      for _ in $(seq 1 100); do pg_ready && break; sleep 0.1; done
      pg_ready || die "PostgreSQL $ver/$name did not come up; see /var/log/postgresql/postgresql-$ver-$name.log"
    fi
  elif [[ -n $DRY_RUN ]]; then
    log "would create (pg_createcluster) or start a PostgreSQL cluster on port $PG_PORT once postgresql is installed"
  else
    die "PostgreSQL does not answer on 127.0.0.1:$PG_PORT and there is no pg_lsclusters to start one; start it"
  fi
fi

if pg_ready && ! err=$(pg_login); then
  case $err in
    *"password authentication failed"* | *"no password supplied"* | *"no pg_hba.conf entry"* | *"Ident authentication failed"* | *"Peer authentication failed"*) ;;
    *) die "cannot log in as postgres@127.0.0.1:$PG_PORT: $err" ;;
  esac
  hba=$(as_postgres psql -p "$PG_PORT" -Atqc 'SHOW hba_file' 2>/dev/null) ||
    die "cannot log in as postgres@127.0.0.1:$PG_PORT ($err), nor over the local socket to find pg_hba.conf"
  if root_run grep -q "$HBA_MARKER" "$hba"; then
    die "cannot log in as postgres@127.0.0.1:$PG_PORT ($err) although $hba has the rule $HBA_MARKER added; check that file"
  fi
  log "PostgreSQL: postgres@127.0.0.1 needs a password ($err); adding a trust rule for the role postgres from loopback only (127.0.0.1/32, ::1/128) at the top of $hba"
  rules="# Added by $HBA_MARKER: the Flashgate tests and dev stack log in as postgres@127.0.0.1
# without a password. Loopback and the role postgres only; delete these lines to undo.
host    all    postgres    127.0.0.1/32    trust
host    all    postgres    ::1/128         trust
"
  if [[ -n $DRY_RUN ]]; then
    log "would prepend to $hba:"$'\n'"$rules"
  else
    tmp=$(mktemp)
    { printf '%s\n' "$rules"; root_run cat "$hba"; } >"$tmp"
    # Keep the file's owner and mode: write into it rather than replacing it.
    as_root sh -c 'cat "$1" > "$2"' sh "$tmp" "$hba"
    rm -f "$tmp"
    as_postgres psql -p "$PG_PORT" -Atqc 'SELECT pg_reload_conf()' >/dev/null
    for _ in $(seq 1 50); do err=$(pg_login) && break; sleep 0.1; done
    pg_login >/dev/null || die "still cannot log in as postgres@127.0.0.1:$PG_PORT after reloading: $(pg_login)"
  fi
fi

# --- 3. Redis on 127.0.0.1:6379 -----------------------------------------------------------------
if ! redis_up; then
  if [[ -n $DRY_RUN ]]; then
    log "would start redis-server on 127.0.0.1:$REDIS_PORT"
  elif port_open "$REDIS_PORT"; then
    die "something listens on 127.0.0.1:$REDIS_PORT but does not answer a Redis PING"
  else
    if [[ $(id -u) == 0 ]]; then
      dir=/var/lib/redis logfile=/var/log/redis/ci.log
    else
      dir=$ROOT/.local/redis-$REDIS_PORT logfile=$ROOT/.local/redis-$REDIS_PORT/redis.log
    fi
    log "starting redis-server on 127.0.0.1:$REDIS_PORT (no persistence; log: $logfile)"
    mkdir -p "$dir" "$(dirname "$logfile")"
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" --save "" --appendonly no \
      --dir "$dir" --logfile "$logfile"
    for _ in $(seq 1 50); do redis_up && break; sleep 0.2; done
    redis_up || die "redis-server did not come up on 127.0.0.1:$REDIS_PORT; see $logfile"
  fi
fi
