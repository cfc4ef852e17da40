#!/usr/bin/env bash
# Checks that a fresh Debian machine gets everything the stack and the tests need from
# scripts/services.sh: runs `scripts/services.sh --test-tools` in a new Debian base system
# (debootstrap --variant=minbase: no PostgreSQL, Redis, curl or Python) and checks the result the
# way the tests use it. Not part of scripts/test.sh: it downloads about 200 MB from the Debian
# mirror the first time (the base system is kept in target/fresh-machine/pristine for reruns).
#
#   bash scripts/check-fresh-machine.sh
#
# The base system runs in a chroot inside private mount, network and PID namespaces (unshare), so
# its Postgres and Redis take 127.0.0.1:5432 and :6379 of their own loopback, invisible to this
# machine's, and die with the namespace. apt inside reaches deb.debian.org through a socat bridge
# over a Unix socket. The environment names a locale the base system lacks (LANG=en_US.UTF-8),
# as many containers do. Needs root, unshare, socat and apt-get (for `apt-get download
# debootstrap`; nothing is installed on this machine).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=$ROOT/target/fresh-machine
SUITE=${FRESH_SUITE:-bookworm}
MIRROR_HOST=deb.debian.org

log() { printf '[fresh-machine] %s\n' "$*" >&2; }

[[ $(id -u) == 0 ]] || { log "needs root (chroot, namespaces)"; exit 1; }
for tool in unshare socat apt-get dpkg-deb; do
  command -v "$tool" >/dev/null || { log "needs $tool"; exit 1; }
done

# --- the base system (once) ----------------------------------------------------------------------
if [[ ! -x $DIR/pristine/bin/bash ]]; then
  rm -rf "$DIR"
  mkdir -p "$DIR/dl"
  chmod 0777 "$DIR/dl" # apt's _apt user downloads into it
  log "fetching debootstrap (apt-get download; nothing installed)"
  (cd "$DIR/dl" && apt-get download -qq debootstrap)
  dpkg-deb -x "$DIR"/dl/debootstrap_*.deb "$DIR/debootstrap"
  log "debootstrap --variant=minbase $SUITE (a few minutes)"
  DEBOOTSTRAP_DIR=$DIR/debootstrap/usr/share/debootstrap \
    "$DIR/debootstrap/usr/sbin/debootstrap" --variant=minbase \
    --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
    "$SUITE" "$DIR/pristine-tmp" "http://$MIRROR_HOST/debian" >"$DIR/debootstrap.log" 2>&1 ||
    { log "debootstrap failed; see $DIR/debootstrap.log"; exit 1; }
  # localhost as on any machine; the mirror through the bridge on the namespace's loopback.
  printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n127.0.0.1 %s\n' "$MIRROR_HOST" \
    >"$DIR/pristine-tmp/etc/hosts"
  mv "$DIR/pristine-tmp" "$DIR/pristine"
fi

# --- a fresh copy, with this checkout's scripts ----------------------------------------------------
rm -rf "$DIR/root"
cp -a "$DIR/pristine" "$DIR/root"
mkdir -p "$DIR/root/work/flashgate"
cp -a scripts "$DIR/root/work/flashgate/"

sock=$DIR/mirror.sock
rm -f "$sock"
socat "UNIX-LISTEN:$sock,fork" "TCP:$MIRROR_HOST:80" &
bridge=$!
trap 'kill "$bridge" 2>/dev/null || true; rm -f "$sock"' EXIT
for _ in $(seq 1 50); do [[ -S $sock ]] && break; sleep 0.1; done

out=$DIR/run.log
log "running scripts/services.sh --test-tools in the new system (output: $out)"
set +e
unshare --mount --net --pid --fork --mount-proc bash -euo pipefail -c '
  R=$1 sock=$2
  ip link set lo up
  socat TCP-LISTEN:80,bind=127.0.0.1,fork,reuseaddr "UNIX-CONNECT:$sock" &
  for _ in $(seq 1 50); do (exec 3<>/dev/tcp/127.0.0.1/80) 2>/dev/null && break; sleep 0.1; done
  mount -t proc proc "$R/proc"
  mount --rbind /dev "$R/dev"
  mount -t tmpfs tmpfs "$R/dev/shm"
  exec chroot "$R" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=en_US.UTF-8 bash -c "
      cd /work/flashgate
      echo \"before: \$(command -v psql pg_isready redis-server redis-cli curl python3 | wc -l) of psql pg_isready redis-server redis-cli curl python3\"
      start=\$SECONDS
      bash scripts/services.sh --test-tools
      echo \"first run: \$((SECONDS - start)) s\"
      export LC_ALL=C.UTF-8
      url=\"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable\"
      psql \"\$url\" -w -Atqc \"SELECT 1\" >/dev/null && echo login-ok
      psql \"\$url\" -w -Atqc \"CREATE DATABASE fresh_check\" && psql \"\$url\" -w -Atqc \"DROP DATABASE fresh_check\" && echo create-database-ok
      echo \"encoding \$(psql \"\$url\" -w -Atc \"SELECT pg_encoding_to_char(encoding) FROM pg_database WHERE datname = current_database()\")\"
      redis-cli -h 127.0.0.1 -p 6379 ping
      ls /usr/lib/postgresql/*/bin/initdb >/dev/null && echo server-binaries-ok
      command -v redis-server curl >/dev/null && echo commands-ok
      python3 -m venv /tmp/venv && /tmp/venv/bin/python -c \"import sys\" && echo venv-ok
      bash scripts/services.sh --test-tools 2>&1 | sed \"s/^/second: /\"
    "
' bash "$DIR/root" "$sock" >"$out" 2>&1
rc=$?
set -e

failures=0
expect() { # <description> <grep -E pattern>
  if grep -Eq -- "$2" "$out"; then log "ok    $1"; else log "FAIL  $1 (no /$2/)"; failures=$((failures + 1)); fi
}
expect "nothing was there before" "^before: 0 of"
expect "the packages are installed" "installed: postgresql redis-server redis-tools curl python3-venv$"
expect "the cluster is started" "starting PostgreSQL cluster [0-9]+/main on port 5432"
expect "the loopback trust rule is added" "adding a trust rule for the role postgres from loopback only"
expect "Redis is started" "starting redis-server on 127.0.0.1:6379"
expect "postgres@127.0.0.1:5432 logs in without a password" "^login-ok$"
expect "it may create databases (as #[sqlx::test] does)" "^create-database-ok$"
expect "the cluster is UTF-8" "^encoding UTF8$"
expect "Redis answers" "^PONG$"
expect "the tests' private Postgres binaries exist" "^server-binaries-ok$"
expect "redis-server and curl exist" "^commands-ok$"
expect "python3 -m venv works" "^venv-ok$"
if grep -q "^second: " "$out"; then log "FAIL  a second run printed something"; failures=$((failures + 1)); else log "ok    a second run does nothing and says nothing"; fi
if ((rc != 0)); then log "FAIL  the run exited with $rc"; failures=$((failures + 1)); fi
grep -E "^first run: " "$out" | sed 's/^/[fresh-machine] /' >&2 || true

rm -rf "$DIR/root"
if ((failures)); then
  log "$failures check(s) failed; the run's output:"
  cat "$out" >&2
  exit 1
fi
log "a fresh $SUITE system got everything from scripts/services.sh"
