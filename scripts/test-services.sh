#!/usr/bin/env bash
# Tests scripts/services.sh — what a fresh machine goes through — without touching this machine:
# every case runs in private Linux namespaces (unshare: own mounts, network and PIDs), where
# /etc/postgresql, /var/lib/postgresql, /var/run/postgresql, /var/log/postgresql and the Redis
# directories are empty tmpfs mounts and 127.0.0.1:5432 / :6379 are free. Whatever the script
# starts there dies with the namespace; the machine's own Postgres, Redis and files are not seen.
#
#   bash scripts/test-services.sh
#
#   1. no cluster, nothing running: services.sh creates a PostgreSQL cluster, starts it, adds the
#      loopback trust rule for `postgres` (Debian's default pg_hba.conf asks for a password),
#      starts Redis; then postgres@127.0.0.1:5432 logs in without a password as the tests do and
#      Redis answers. A second run does nothing and prints nothing. Stopped services are started
#      again without a second cluster or a second rule.
#   2. packages missing (PostgreSQL server hidden, commands hidden from PATH), --dry-run: the plan
#      is `apt-get update` and `apt-get install` of exactly the missing packages; nothing changes.
#   3. packages missing and no apt-get: a clear error naming what is missing, exit status 1.
#
# Needs root and unshare(1) (CI runs as root); elsewhere it says so and skips (exit 0).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

log() { printf '[test-services] %s\n' "$*" >&2; }

if [[ $(id -u) != 0 ]] || ! unshare --mount --net --pid --fork --mount-proc true 2>/dev/null; then
  log "SKIPPED: needs root and unshare (private mount, network and PID namespaces)"
  exit 0
fi
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || ! command -v redis-server >/dev/null; then
  log "PostgreSQL (Debian layout) and redis-server must be installed: run bash scripts/services.sh first"
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 0755 "$work"

# A PATH with every command of the current PATH except the named ones (symlinks).
path_without() { # <dir> <command>...
  local dir=$1 d f
  shift
  mkdir -p "$dir"
  local IFS=:
  for d in $PATH; do
    [[ -d $d ]] || continue
    for f in "$d"/*; do
      [[ -x $f && ! -d $f ]] || continue
      local name=${f##*/}
      [[ -e $dir/$name ]] && continue
      local hidden=""
      for h in "$@"; do [[ $name == "$h" ]] && hidden=1; done
      [[ -n $hidden ]] || ln -s "$f" "$dir/$name"
    done
  done
}

# Runs a bash snippet in fresh namespaces: loopback up, empty Postgres/Redis state directories.
# The snippet sees $SERVICES (the script under test) and $WORK (this run's temp dir); its stdout
# and stderr go to the named file; its exit status is returned.
in_namespaces() { # <output file> <snippet>
  local out=$1 snippet=$2
  SERVICES=$ROOT/scripts/services.sh WORK=$work unshare --mount --net --pid --fork --mount-proc bash -euo pipefail -c '
    ip link set lo up
    for d in /etc/postgresql /var/lib/postgresql /var/run/postgresql /var/log/postgresql /var/lib/redis /var/log/redis; do
      mkdir -p "$d"
      mount -t tmpfs -o mode=0755 tmpfs "$d"
    done
    chown postgres:postgres /var/lib/postgresql /var/run/postgresql /var/log/postgresql
    chmod 2775 /var/run/postgresql
    '"$snippet" >"$out" 2>&1
}

failures=0
expect() { # <description> <file> <grep -E pattern>
  if grep -Eq -- "$3" "$2"; then
    log "ok    $1"
  else
    log "FAIL  $1: no line matching /$3/ in:"
    sed 's/^/        /' "$2" >&2
    failures=$((failures + 1))
  fi
}
expect_not() { # <description> <file> <grep -E pattern>
  if grep -Eq -- "$3" "$2"; then
    log "FAIL  $1: unexpected line matching /$3/ in:"
    sed 's/^/        /' "$2" >&2
    failures=$((failures + 1))
  else
    log "ok    $1"
  fi
}

# --- 1. nothing set up ---------------------------------------------------------------------------
log "case 1: no cluster, nothing running (real run in namespaces)"
in_namespaces "$work/fresh.log" '
  echo "== first run"
  bash "$SERVICES"
  echo "== login as the tests do"
  psql "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable" -w -Atqc "SELECT 1" >/dev/null && echo login-ok
  redis-cli -h 127.0.0.1 -p 6379 ping
  hba=$(ls /etc/postgresql/*/main/pg_hba.conf)
  echo "trust rules: $(grep -c "^host .*postgres .*trust" "$hba")"
  echo "== second run"
  bash "$SERVICES" 2>&1 | sed "s/^/second: /"
  echo "== services stopped"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main stop
  redis-cli -p 6379 shutdown nosave >/dev/null 2>&1 || true
  bash "$SERVICES" 2>&1 | sed "s/^/third: /"
  psql "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable" -w -Atqc "SELECT 1" >/dev/null && echo login-again-ok
  redis-cli -h 127.0.0.1 -p 6379 ping
  echo "clusters: $(pg_lsclusters -h | wc -l)"
  echo "trust rules now: $(grep -c "^host .*postgres .*trust" "$hba")"
' || { log "FAIL  case 1 exited with $?"; failures=$((failures + 1)); }
f=$work/fresh.log
expect "a cluster is created on port 5432" "$f" "creating PostgreSQL [0-9]+ cluster 'main' on port 5432"
expect "the cluster is started" "$f" "starting PostgreSQL cluster [0-9]+/main on port 5432"
expect "the trust rule is announced" "$f" "adding a trust rule for the role postgres from loopback only"
expect "Redis is started" "$f" "starting redis-server on 127.0.0.1:6379"
expect "postgres@127.0.0.1:5432 logs in without a password" "$f" "^login-ok$"
expect "Redis answers" "$f" "^PONG$"
expect "exactly two trust rules (IPv4, IPv6)" "$f" "^trust rules: 2$"
expect_not "a second run does nothing and says nothing" "$f" "^second: "
expect "stopped services: the cluster is started again" "$f" "^third: .*starting PostgreSQL cluster [0-9]+/main"
expect "stopped services: Redis is started again" "$f" "^third: .*starting redis-server"
expect_not "stopped services: no new cluster" "$f" "^third: .*creating PostgreSQL"
expect_not "stopped services: no new rule" "$f" "^third: .*adding a trust rule"
expect "and the login works again" "$f" "^login-again-ok$"
expect "one cluster, two rules at the end" "$f" "^clusters: 1$"
expect "no rule added twice" "$f" "^trust rules now: 2$"

# --- 2. packages missing: the plan ----------------------------------------------------------------
log "case 2: packages missing, --dry-run"
path_without "$work/bin-noredis" redis-server redis-cli curl python3 chromium
in_namespaces "$work/missing.log" '
  mount -t tmpfs tmpfs /usr/lib/postgresql   # no PostgreSQL server (nor a working psql)
  PATH=$WORK/bin-noredis bash "$SERVICES" --test-tools --dry-run
  echo "clusters after: $(ls /etc/postgresql | wc -l)"
' || { log "FAIL  case 2 exited with $?"; failures=$((failures + 1)); }
f=$work/missing.log
expect "the plan names the missing packages" "$f" "installing OS packages with apt-get: postgresql redis-server redis-tools curl python3-venv chromium \("
expect "apt-get update first" "$f" "would run: apt-get update -qq"
expect "then apt-get install of exactly those" "$f" "would run: env DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 LC_ALL=C.UTF-8 apt-get install -y -qq --no-install-recommends postgresql redis-server redis-tools curl python3-venv chromium$"
expect "then a cluster and Redis" "$f" "would (create|run: env LANG=C.UTF-8 LC_ALL=C.UTF-8 pg_createcluster)"
expect "Redis would be started" "$f" "would start redis-server on 127.0.0.1:6379"
expect "a dry run creates nothing" "$f" "^clusters after: 0$"

log "case 2b: only redis-cli missing, Postgres present"
path_without "$work/bin-nocli" redis-cli
in_namespaces "$work/nocli.log" '
  PATH=$WORK/bin-nocli bash "$SERVICES" --dry-run
' || { log "FAIL  case 2b exited with $?"; failures=$((failures + 1)); }
expect "only redis-tools is planned" "$work/nocli.log" "installing OS packages with apt-get: redis-tools \(no redis-cli\)$"

# --- 3. no apt-get ---------------------------------------------------------------------------------
log "case 3: redis-server missing and no apt-get"
path_without "$work/bin-noapt" redis-server apt-get
set +e
in_namespaces "$work/noapt.log" '
  PATH=$WORK/bin-noapt bash "$SERVICES"
'
rc=$?
set -e
if [[ $rc == 1 ]]; then log "ok    exit status 1"; else log "FAIL  exit status $rc, want 1"; failures=$((failures + 1)); fi
expect "the error names what is missing" "$work/noapt.log" "error: missing: no redis-server\. Install redis-server .*apt-get only"

if ((failures)); then
  log "$failures check(s) failed"
  exit 1
fi
log "all checks passed"
