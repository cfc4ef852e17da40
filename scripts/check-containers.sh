#!/usr/bin/env bash
# Runs the containers for real: builds the origin and edge images from Dockerfile and
# deploy/edge.Dockerfile, brings up the stack of docker-compose.yml with podman (both origins,
# three Redis nodes, Postgres, the edge, Prometheus of the observability profile), sells through it
# as a shopper would, breaks it (a Redis node killed mid-sale, an origin stopped mid-sale) and tears
# it all down. Not part of scripts/test.sh: a first run takes 15 to 30 minutes on 2 cores (the
# Rust builds inside the images); docs/development.md has the figures.
#
#   bash scripts/check-containers.sh            # needs root; installs what it needs with apt-get
#
# Engine: podman 4.3 and buildah (Debian's), no Docker engine; compose: podman-compose (pinned,
# from PyPI, in .local/containers/venv). The user-facing files are used unchanged; the script adds
# only scripts/containers/compose.check.yml (published ports on 127.0.0.1 at free ports, Grafana
# out of the profile) and, where an upstream base image cannot be pulled (no image registry is
# reachable here), a stand-in built from a debootstrapped Debian bookworm and tagged with the
# upstream name (scripts/containers/standins.Containerfile). Grafana is not in Debian: its
# provisioning is checked against the running Prometheus instead (every dashboard query through the
# datasource's URL from inside the compose network).
#
# Two things podman 4.3 does not do that Docker does, which the script does itself:
#   - depends_on conditions (podman-compose ignores service_healthy below podman 4.6): services are
#     brought up in the order their depends_on asks, each tier waited for before the next;
#   - scheduled healthchecks (podman runs them from systemd timers; this machine has no systemd):
#     while it waits, the script runs each container's own healthcheck (`podman healthcheck run`)
#     at its interval, and fails a service that is not healthy by the end of its start_period plus
#     retries × interval.
#
# Each step prints what it checks and how long it took; the first failed step stops the run with
# the last log lines of the stack's containers, and everything started is torn down (trap), even
# on failure. Secrets are generated per run, passed only through the environment, never printed.
# Cached under .local/containers (gitignored): the debootstrapped base, the podman-compose venv,
# build logs. Images stay in podman's storage, so a second run rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STATE=$ROOT/.local/containers
LOGS=$STATE/logs
PROJECT=${CHECK_CONTAINERS_PROJECT:-flashgate-check}
PODMAN_COMPOSE_VERSION=1.6.0
SUITE=bookworm
MIRROR=http://deb.debian.org/debian
BASE_IMAGE=localhost/flashgate-standin/bookworm:minbase
ORIGIN_IMAGE=flashgate/origin:dev
EDGE_IMAGE=flashgate/edge:dev
ORIGIN_MAX_BYTES=$((120 * 1000 * 1000))
T0=$SECONDS

log() { printf '[check-containers] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ $(id -u) == 0 ]] || die "needs root (podman, buildah and debootstrap run as root here)"
mkdir -p "$STATE" "$LOGS"

# --- steps ---------------------------------------------------------------------------------------
STEP=0
STEP_NAME=""
TIMES=()
STACK_UP=""
step() { # <title> <function> [args...]: runs one step, stops the run on its failure
    local title=$1 t0=$SECONDS
    shift
    STEP=$((STEP + 1))
    STEP_NAME=$title
    printf '\n[check-containers] == %d. %s\n' "$STEP" "$title" >&2
    if "$@"; then
        TIMES+=("$(printf '%3d s  %d. %s' $((SECONDS - t0)) "$STEP" "$title")")
        log "ok: $title ($((SECONDS - t0)) s)"
        if [[ $STEP == "${CHECK_CONTAINERS_UNTIL:-}" ]]; then
            log "CHECK_CONTAINERS_UNTIL=$STEP: stopping here"
            exit 0
        fi
    else
        log "FAILED at step $STEP: $title (after $((SECONDS - t0)) s)"
        exit 1
    fi
}
ok() { log "  ok   $*"; }
bad() { log "  FAIL $*"; return 1; }

compose() {
    "$STATE/venv/bin/podman-compose" --project-name "$PROJECT" \
        -f "$ROOT/docker-compose.yml" -f "$STATE/compose.check.yml" \
        --profile observability "$@"
}
ctr() { printf '%s_%s_1' "$PROJECT" "$1"; } # the container of a compose service

project_containers() {
    podman ps -a --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Names}}' 2>/dev/null || true
}
dump_logs() {
    local c
    for c in $(project_containers); do
        printf '\n[check-containers] --- last log lines of %s (%s)\n' "$c" \
            "$(podman inspect --format '{{.State.Status}} exit={{.State.ExitCode}} health={{.State.Health.Status}}' "$c" 2>/dev/null)" >&2
        podman logs "$c" >"$LOGS/$c.log" 2>&1 || true
        tail -n "${LOG_LINES:-25}" "$LOGS/$c.log" | sed 's/^/    /' >&2
    done
    log "the whole logs: .local/containers/logs/${PROJECT}_*.log"
}
teardown() {
    local rc=$?
    set +e
    if [[ -n $STACK_UP ]]; then
        ((rc != 0)) && dump_logs
        printf '\n[check-containers] == teardown\n' >&2
        compose down -v -t 30 >"$LOGS/down.log" 2>&1
        # Anything podman-compose left (a `compose run` container, the network, the volumes).
        for c in $(project_containers); do podman rm -f -t 5 "$c" >/dev/null 2>&1; done
        for v in $(podman volume ls --filter "label=io.podman.compose.project=$PROJECT" -q 2>/dev/null); do
            podman volume rm -f "$v" >/dev/null 2>&1
        done
        podman pod rm -f "pod_$PROJECT" >/dev/null 2>&1
        podman network rm -f "${PROJECT}_default" >/dev/null 2>&1
        local left
        left=$(project_containers; podman volume ls -q --filter "label=io.podman.compose.project=$PROJECT"; podman network ls -q --filter "name=^${PROJECT}_")
        if [[ -n $left ]]; then
            log "teardown left: $left"
            ((rc == 0)) && rc=1
        else
            log "teardown: no container, volume or network of $PROJECT is left"
        fi
    fi
    rm -f "$STATE/run.env"
    printf '\n[check-containers] time per step:\n' >&2
    printf '    %s\n' "${TIMES[@]}" >&2
    log "total $((SECONDS - T0)) s; $( ((rc == 0)) && echo "all steps passed" || echo "FAILED at step $STEP: $STEP_NAME")"
    exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT TERM

# --- 1. tools ------------------------------------------------------------------------------------
tools() {
    local pkgs=(podman buildah debootstrap netavark aardvark-dns iptables crun conmon catatonit
        fuse-overlayfs uidmap slirp4netns runc python3-venv curl openssl)
    local missing=() p
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        log "apt-get install ${missing[*]}"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "${missing[@]}"; } >"$LOGS/apt.log" 2>&1 ||
            { tail -20 "$LOGS/apt.log" >&2; return 1; }
    fi
    if [[ ! -x $STATE/venv/bin/podman-compose ]] ||
        [[ $("$STATE/venv/bin/podman-compose" --version 2>/dev/null | awk '/podman-compose/ {print $NF}') != "$PODMAN_COMPOSE_VERSION" ]]; then
        log "podman-compose $PODMAN_COMPOSE_VERSION from PyPI into .local/containers/venv"
        python3 -m venv "$STATE/venv"
        "$STATE/venv/bin/pip" install -q --disable-pip-version-check "podman-compose==$PODMAN_COMPOSE_VERSION" ||
            return 1
    fi
    ok "$(podman --version), $(buildah --version | cut -d' ' -f1-3), podman-compose $PODMAN_COMPOSE_VERSION"
    podman_conf
}
# podman's own configuration for this script (CONTAINERS_CONF, nothing system-wide):
#   - runc, not crun: crun refuses cgroups in hybrid mode (v1 controllers plus a v2 hierarchy that
#     has a controller), as this machine has;
#   - rlimits a container may have: podman asks for nofile 1048576 by default and lowers its own
#     nproc to 32768 before it starts the runtime; without CAP_SYS_RESOURCE (as here) raising
#     either fails every container start ("error setting rlimit type 7/6: operation not permitted").
podman_conf() {
    local nofile nproc
    nofile=$(ulimit -Hn)
    nproc=$(ulimit -Hu)
    [[ $nofile == unlimited ]] && nofile=1048576
    if [[ $nproc == unlimited ]] || ((nproc > 32768)); then nproc=32768; fi
    {
        echo "# Written by scripts/check-containers.sh for its own podman calls (CONTAINERS_CONF)."
        echo "[containers]"
        echo "default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]"
        echo "[engine]"
        echo "runtime = \"runc\""
    } >"$STATE/containers.conf"
    export CONTAINERS_CONF=$STATE/containers.conf
    ok "podman: runtime runc, rlimits nofile $nofile, nproc $nproc (.local/containers/containers.conf)"
}

# --- 2. base system for stand-ins -----------------------------------------------------------------
base() {
    local rootfs=$STATE/bookworm-minbase
    if [[ ! -x $rootfs/bin/bash ]]; then
        rm -rf "$rootfs" "$rootfs.tmp"
        log "debootstrap --variant=minbase $SUITE (about 200 MB from the Debian mirror, once)"
        debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
            "$SUITE" "$rootfs.tmp" "$MIRROR" >"$LOGS/debootstrap.log" 2>&1 ||
            { tail -20 "$LOGS/debootstrap.log" >&2; return 1; }
        # Trimmed as the slim image is: no docs, man pages, locales; dpkg keeps them out later.
        cat >"$rootfs.tmp/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
        find "$rootfs.tmp/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
        rm -rf "$rootfs.tmp"/usr/share/{man,info,groff,lintian,linda}/* \
            "$rootfs.tmp"/var/cache/apt/archives/*.deb "$rootfs.tmp"/var/lib/apt/lists/* \
            "$rootfs.tmp"/var/log/*.log "$rootfs.tmp"/var/cache/debconf/*-old
        find "$rootfs.tmp/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
        printf 'APT::Install-Recommends "false";\n' >"$rootfs.tmp/etc/apt/apt.conf.d/01norecommends"
        mv "$rootfs.tmp" "$rootfs"
        podman rmi -f "$BASE_IMAGE" >/dev/null 2>&1 || true
    fi
    if ! podman image exists "$BASE_IMAGE"; then
        tar -C "$rootfs" -c . | podman import --change 'CMD ["bash"]' - "$BASE_IMAGE" >/dev/null || return 1
    fi
    ok "$BASE_IMAGE ($(du -sh "$rootfs" | cut -f1) debootstrapped $SUITE minbase, cached in .local/containers)"
}

# --- 3. upstream base images, or stand-ins ---------------------------------------------------------
STANDINS=()
standin() { # <upstream image> <target in standins.Containerfile> [extra podman build args]
    local image=$1 target=$2 full
    shift 2
    full=$image
    [[ $image == */* ]] || full=docker.io/library/$image
    [[ $full == docker.io/* ]] || full=docker.io/$image
    local label
    label=$(podman image inspect --format '{{index .Labels "org.flashgate.standin"}}' "$full" 2>/dev/null || echo absent)
    if [[ $label != absent && -z $label ]]; then
        ok "$image: the upstream image is in local storage"
        return 0
    fi
    if [[ $label == absent ]] && podman pull -q "$full" >/dev/null 2>&1; then
        ok "$image: pulled the upstream image"
        return 0
    fi
    podman build --pull=never --network=host --format docker --target "$target" \
        --build-arg "BASE=$BASE_IMAGE" -v /usr/local/share/ca-certificates:/host-ca:ro "$@" -t "$full" \
        -f scripts/containers/standins.Containerfile scripts/containers \
        >"$LOGS/standin-$target.log" 2>&1 || { tail -30 "$LOGS/standin-$target.log" >&2; return 1; }
    STANDINS+=("$image")
    ok "$image: cannot be pulled here; stand-in built from Debian ($(podman image inspect --format '{{.Size}}' "$full" | awk '{printf "%.0f MB", $1/1e6}'))"
}
base_images() {
    local tc rustup node npm
    tc=$(readlink -f "$(dirname "$(rustup +1.95.0 which rustc)")/..") || { bad "no Rust 1.95.0 toolchain (rustup) on this machine"; return 1; }
    rustup=$(readlink -f "$(command -v rustup)")
    node=$(readlink -f "$(command -v node)")
    npm=$(readlink -f "$(dirname "$(readlink -f "$(command -v npm)")")/..")
    [[ $("$node" --version) == v20.* ]] || { bad "the stand-in for node:20 needs this machine's Node 20 (found $("$node" --version))"; return 1; }
    standin debian:bookworm-slim debian-slim || return 1
    standin rust:1.95-bookworm rust -v "$tc:/host-toolchain:ro" -v "$rustup:/host-rustup:ro" || return 1
    standin node:20-bookworm node -v "$node:/host-node/bin/node:ro" -v "$npm:/host-node/lib/node_modules/npm:ro" || return 1
    standin node:20-bookworm-slim node -v "$node:/host-node/bin/node:ro" -v "$npm:/host-node/lib/node_modules/npm:ro" || return 1
    standin redis:7 redis || return 1
    standin postgres:15 postgres || return 1
    standin prom/prometheus:v3.1.0 prometheus || return 1
    ((${#STANDINS[@]} == 0)) || log "  stand-ins (Debian's packages, not the upstream images): ${STANDINS[*]}"
}

# --- 4./5. the project's images ----------------------------------------------------------------------
build_image() { # <tag> <dockerfile> <target> <log name>
    local t0=$SECONDS
    # --format docker keeps HEALTHCHECK (the OCI format has no field for it; Docker keeps it).
    # --network=host: the build reaches crates.io and npm as this machine does.
    podman build --pull=never --network=host --format docker -f "$2" --target "$3" -t "$1" . \
        >"$LOGS/build-$4.log" 2>&1 || { tail -40 "$LOGS/build-$4.log" >&2; return 1; }
    ok "$1 built from $2 (target $3) in $((SECONDS - t0)) s, $(podman image inspect --format '{{.Size}}' "$1" | awk '{printf "%.1f MB", $1/1e6}'); log: .local/containers/logs/build-$4.log"
}

# --- 6. image hygiene ------------------------------------------------------------------------------
hygiene() {
    local failed=0 img user size ep
    for img in "$ORIGIN_IMAGE" "$EDGE_IMAGE"; do
        user=$(podman image inspect --format '{{.Config.User}}' "$img")
        local uid
        uid=$(podman run --rm --entrypoint id "$img" -u 2>/dev/null) || uid="?"
        if [[ -n $user && $uid != 0 && $uid != "?" ]]; then ok "$img runs as a non-root user (USER $user, uid $uid)"; else bad "$img runs as root (USER '${user}', uid $uid)" || failed=1; fi
        local found
        found=$(podman run --rm --entrypoint sh "$img" -c \
            'for t in cargo rustc rustup gcc cc c++ ld make worker-build wasm-bindgen; do command -v "$t"; done; ls -d /usr/local/cargo /usr/local/rustup /root/.cargo /app/node_modules/binaryen /app/node_modules/puppeteer-core 2>/dev/null; true' 2>/dev/null)
        if [[ -z $found ]]; then ok "$img has no build toolchain (no cargo, rustc, gcc, cc, ld, make, worker-build, wasm-bindgen, wasm-opt, puppeteer)"; else bad "$img carries build tools: ${found//$'\n'/ }" || failed=1; fi
        local envs
        envs=$(podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$img")
        if grep -Eq '^(SESSION_SECRETS?|EDGE_SHARED_SECRETS?|ADMIN_TOKENS?|ROOM_SECRETS?|POW_SECRETS?|LOG_HASH_KEY|POSTGRES_PASSWORD|DATABASE_URL)=' <<<"$envs"; then
            bad "$img bakes a secret into its environment" || failed=1
        else ok "$img bakes no secret into its environment"; fi
    done
    size=$(podman image inspect --format '{{.Size}}' "$ORIGIN_IMAGE")
    if ((size <= ORIGIN_MAX_BYTES)); then ok "$ORIGIN_IMAGE is $(awk -v s="$size" 'BEGIN{printf "%.1f", s/1e6}') MB (limit 120 MB)"; else bad "$ORIGIN_IMAGE is $(awk -v s="$size" 'BEGIN{printf "%.1f", s/1e6}') MB, above 120 MB" || failed=1; fi
    ok "$EDGE_IMAGE is $(podman image inspect --format '{{.Size}}' "$EDGE_IMAGE" | awk '{printf "%.1f MB", $1/1e6}') (no limit set: wrangler and workerd are most of it)"
    ep=$(podman image inspect --format '{{json .Config.Entrypoint}}' "$ORIGIN_IMAGE")
    if [[ $ep == '["/usr/local/bin/origin"]' ]]; then ok "$ORIGIN_IMAGE ENTRYPOINT $ep (exec form: the origin is PID 1 and gets SIGTERM itself; step 'stop an origin mid-sale' checks it)"; else bad "$ORIGIN_IMAGE ENTRYPOINT $ep, want [\"/usr/local/bin/origin\"]" || failed=1; fi
    local hc
    for img in "$ORIGIN_IMAGE" "$EDGE_IMAGE"; do
        hc=$(podman image inspect --format '{{if .Config.Healthcheck}}{{json .Config.Healthcheck.Test}}{{end}}' "$img" 2>/dev/null)
        if [[ -n $hc ]]; then ok "$img has its HEALTHCHECK $hc"; else bad "$img has no HEALTHCHECK" || failed=1; fi
    done
    return "$failed"
}

# --- 7. secrets only from the environment ----------------------------------------------------------
secrets_required() {
    # Each secret alone missing (the others set): `compose config` must refuse, naming it.
    local var out failed=0 dummy=0123456789abcdef0123
    local all=(SESSION_SECRET EDGE_SHARED_SECRET ADMIN_TOKEN) others o
    for var in "${all[@]}"; do
        others=()
        for o in "${all[@]}"; do [[ $o == "$var" ]] || others+=("$o=$dummy"); done
        if out=$(env -u SESSION_SECRET -u EDGE_SHARED_SECRET -u ADMIN_TOKEN "${others[@]}" \
            "$STATE/venv/bin/podman-compose" -f docker-compose.yml config 2>&1); then
            bad "compose config accepted the file without $var" || failed=1
        elif grep -q "$var is missing a value: set $var (>= 16 chars)" <<<"$out"; then
            ok "without $var, compose config refuses: $(grep -o "set $var (>= 16 chars)[^\"']*" <<<"$out" | head -1)"
        else
            bad "without $var, compose config failed, but not naming it: $(tail -1 <<<"$out")" || failed=1
        fi
    done
    return "$failed"
}

# --- the run's secrets and ports --------------------------------------------------------------------
free_ports() { # <n>: n free TCP ports on 127.0.0.1
    python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}
prepare_run() {
    local ports
    read -r -a ports <<<"$(free_ports 5)"
    export CHECK_ORIGIN1_PORT=${ports[0]} CHECK_ORIGIN2_PORT=${ports[1]} CHECK_EDGE_PORT=${ports[2]} \
        CHECK_PROMETHEUS_PORT=${ports[3]} CHECK_GRAFANA_PORT=${ports[4]}
    # Fresh secrets per run, in the environment only (compose interpolates them).
    export SESSION_SECRET EDGE_SHARED_SECRET ADMIN_TOKEN POSTGRES_PASSWORD LOG_HASH_KEY POW_SECRET
    SESSION_SECRET=$(openssl rand -hex 24)
    POW_SECRET=$(openssl rand -hex 24)
    EDGE_SHARED_SECRET=$(openssl rand -hex 24)
    ADMIN_TOKEN=$(openssl rand -hex 24)
    POSTGRES_PASSWORD=$(openssl rand -hex 16)
    LOG_HASH_KEY=$(openssl rand -hex 24)
    # The override with this run's ports written in (podman-compose 1.6 does not interpolate
    # values under `!override`).
    sed -e "s/\${CHECK_ORIGIN1_PORT:?}/$CHECK_ORIGIN1_PORT/; s/\${CHECK_ORIGIN2_PORT:?}/$CHECK_ORIGIN2_PORT/" \
        -e "s/\${CHECK_EDGE_PORT:?}/$CHECK_EDGE_PORT/; s/\${CHECK_PROMETHEUS_PORT:?}/$CHECK_PROMETHEUS_PORT/" \
        -e "s/\${CHECK_GRAFANA_PORT:?}/$CHECK_GRAFANA_PORT/" scripts/containers/compose.check.yml >"$STATE/compose.check.yml"
    # shellcheck disable=SC2016 # a literal ${
    if grep -q '\${CHECK_' "$STATE/compose.check.yml"; then bad "a port of scripts/containers/compose.check.yml was not filled in"; return 1; fi
    ORIGIN1=http://127.0.0.1:$CHECK_ORIGIN1_PORT
    ORIGIN2=http://127.0.0.1:$CHECK_ORIGIN2_PORT
    EDGE=http://127.0.0.1:$CHECK_EDGE_PORT
    PROM=http://127.0.0.1:$CHECK_PROMETHEUS_PORT
    if [[ -n $(project_containers) ]]; then
        log "  containers of an earlier run of $PROJECT are left: removing them"
        STACK_UP=1
        compose down -v -t 5 >"$LOGS/down-earlier.log" 2>&1 || true
    fi
    ok "host ports on 127.0.0.1: origin-1 $CHECK_ORIGIN1_PORT, origin-2 $CHECK_ORIGIN2_PORT, edge $CHECK_EDGE_PORT, prometheus $CHECK_PROMETHEUS_PORT (secrets: fresh, environment only)"
}

# --- 8. the stack, tier by tier ------------------------------------------------------------------------
# Tiers in depends_on order, as docker-compose.yml declares it (checked below).
TIERS=("redis-1 redis-2 redis-3 postgres" "origin-1 origin-2" "edge prometheus")
health_of() { podman inspect --format '{{.State.Health.Status}}' "$(ctr "$1")" 2>/dev/null || echo missing; }
dur_s() { # Go duration (5s, 1m30s, 500ms) or nanoseconds -> seconds
    python3 -c 'import re,sys
v=sys.argv[1]
if v.isdigit(): print(int(v)//10**9); sys.exit()
t=0.0
for n,u in re.findall(r"([0-9.]+)(ms|s|m|h)", v): t+=float(n)*{"ms":1e-3,"s":1,"m":60,"h":3600}[u]
print(round(t))' "$1"
}
wait_healthy() { # <service>...: runs each container's healthcheck at its interval until healthy
    local svc c start interval retries t0=$SECONDS
    declare -A next limit green
    for svc in "$@"; do
        c=$(ctr "$svc")
        read -r start interval retries < <(podman inspect --format \
            '{{.Config.Healthcheck.StartPeriod}} {{.Config.Healthcheck.Interval}} {{.Config.Healthcheck.Retries}}' "$c")
        next[$svc]=$SECONDS
        limit[$svc]=$((SECONDS + $(dur_s "$start") + $(dur_s "$interval") * retries))
        green[$svc]=""
        # Green within its start_period; without one, within its own retries × interval.
        STARTP[$svc]=$(dur_s "$start")
        INTERVAL[$svc]=$(dur_s "$interval")
        ((INTERVAL[$svc] > 0)) || INTERVAL[$svc]=30
        ((STARTP[$svc] > 0)) || STARTP[$svc]=$((INTERVAL[$svc] * retries))
    done
    while :; do
        local pending=0
        for svc in "$@"; do
            [[ -n ${green[$svc]} ]] && continue
            pending=1
            c=$(ctr "$svc")
            if [[ $(podman inspect --format '{{.State.Status}}' "$c") != running ]]; then
                bad "$svc is not running ($(podman inspect --format 'exit {{.State.ExitCode}}' "$c"))"
                return 1
            fi
            if ((SECONDS >= next[$svc])); then
                next[$svc]=$((SECONDS + INTERVAL[$svc]))
                if podman healthcheck run "$c" >/dev/null 2>&1; then
                    green[$svc]=$((SECONDS - t0))
                    if ((green[$svc] <= STARTP[$svc])); then
                        ok "$svc healthy after ${green[$svc]} s (allowed ${STARTP[$svc]} s: start_period, or retries × interval)"
                    else
                        bad "$svc healthy only after ${green[$svc]} s, past its start_period of ${STARTP[$svc]} s"
                        return 1
                    fi
                elif ((SECONDS > limit[$svc])); then
                    bad "$svc not healthy after $((SECONDS - t0)) s (start_period + retries × interval); health: $(health_of "$svc")"
                    return 1
                fi
            fi
        done
        ((pending)) || return 0
        sleep 0.5
    done
}
declare -A STARTP INTERVAL
stack_up() {
    STACK_UP=1
    local tier t0
    # The order check needs PyYAML: podman-compose's venv has it.
    if ! compose config 2>/dev/null | "$STATE/venv/bin/python" -c '
import sys, yaml
doc = yaml.safe_load(sys.stdin)
tiers = [t.split() for t in sys.argv[1:]]
tier_of = {s: i for i, t in enumerate(tiers) for s in t}
bad = [f"{n} depends on {d}, not in an earlier tier" for n, s in doc["services"].items() if n in tier_of
       for d in (s.get("depends_on") or {}) if tier_of.get(d, 99) >= tier_of[n]]
missing = [n for n in doc["services"] if n not in tier_of and n != "grafana"]
for line in bad + [f"service {n} is in no tier" for n in missing]:
    print(line, file=sys.stderr)
sys.exit(1 if bad or missing else 0)' "${TIERS[@]}"; then
        bad "the tiers ${TIERS[*]} do not follow docker-compose.yml's depends_on"
        return 1
    fi
    for tier in "${TIERS[@]}"; do
        t0=$SECONDS
        # shellcheck disable=SC2086
        compose up -d --no-deps $tier >"$LOGS/up.log" 2>&1 || { tail -20 "$LOGS/up.log" >&2; return 1; }
        ok "started: $tier"
        # shellcheck disable=SC2086
        wait_healthy $tier || return 1
    done
}

# --- shopper helpers (Python standard library only) -------------------------------------------------
py() { python3 "$ROOT/scripts/containers/shopper.py" "$@"; }

# --- 9. a shopper ------------------------------------------------------------------------------------
shopper() {
    py shop --origin "$ORIGIN1" --edge "$EDGE" --sku CHECK-1
}

# --- 10. Prometheus ------------------------------------------------------------------------------------
prometheus() {
    py prometheus --prometheus "$PROM" --expect-up origin-1:8080,origin-2:8080 || return 1
    # Grafana's provisioning (no Grafana here): the datasource's URL, from inside the compose
    # network, answers every query of the dashboard.
    local url q failed=0 n=0
    url=$("$STATE/venv/bin/python" -c 'import yaml;print(yaml.safe_load(open("deploy/grafana/provisioning/datasources/prometheus.yml"))["datasources"][0]["url"])')
    while IFS= read -r q; do
        n=$((n + 1))
        local answer
        answer=$(podman exec "$(ctr prometheus)" wget -qO- "$url/api/v1/query?query=$q" 2>&1) || answer="wget failed: $answer"
        grep -q '"status":"success"' <<<"$answer" || { bad "dashboard query $n through $url: $answer"; failed=1; }
    done < <(py dashboard-queries deploy/grafana/lock-health.json)
    ((failed)) || ok "Grafana's datasource URL $url answers all $n queries of deploy/grafana/lock-health.json from inside the compose network (Grafana itself: not run, no Debian package)"
    return "$failed"
}

# --- 11. reconcile -------------------------------------------------------------------------------------
reconcile() {
    local out rc=0
    out=$(compose run --rm --no-deps origin-1 reconcile 2>&1) || rc=$?
    if ((rc == 0)) && grep -q "reconciliation: ok" <<<"$out"; then
        ok "compose run --rm origin-1 reconcile: $(grep 'reconciliation:' <<<"$out")"
    else
        bad "reconcile exited $rc: $(tail -5 <<<"$out")"
    fi
}

# --- 12. a Redis node killed mid-sale ------------------------------------------------------------------
kill_redis() {
    py sale --origin "$ORIGIN1" --edge "$EDGE" --sku CHECK-REDIS --shoppers 60 \
        --during "podman kill $(ctr redis-2)" || return 1
    reconcile || return 1
    # Back, empty (no persistence): the origins take it into the quorum again after their restart
    # guard (one LOCK_TTL_MS); the rest of the run has all three nodes.
    log "  redis-2 after the kill: $(podman inspect --format '{{.State.Status}}, exit {{.State.ExitCode}}' "$(ctr redis-2)") (podman 4.3 does not apply restart: unless-stopped after a kill)"
    compose start redis-2 >"$LOGS/start.log" 2>&1 || { tail -5 "$LOGS/start.log" >&2; return 1; }
    wait_healthy redis-2
}

# --- 13. an origin stopped mid-sale ---------------------------------------------------------------------
stop_origin() {
    local rc
    py sale --origin "$ORIGIN1" --edge "$EDGE" --sku CHECK-STOP --shoppers 80 --signed-to "$ORIGIN2" \
        --during "podman stop -t 30 $(ctr origin-2)" --stop-log "$LOGS/stop-origin-2.txt" || return 1
    rc=$(podman inspect --format '{{.State.ExitCode}}' "$(ctr origin-2)")
    if [[ $rc == 0 ]]; then ok "origin-2 exited 0 on SIGTERM ($(cat "$LOGS/stop-origin-2.txt"))"; else bad "origin-2 exited $rc on stop (137 = killed after the grace period)"; return 1; fi
    py shop --origin "$ORIGIN1" --edge "$EDGE" --sku CHECK-STOP-AFTER || return 1
    ok "with origin-2 stopped, the edge sells through origin-1"
    py prometheus --prometheus "$PROM" --expect-up origin-1:8080 --expect-down origin-2:8080 || return 1
    reconcile
}

# --- 14. the edge stops on SIGTERM ------------------------------------------------------------------------
stop_edge() {
    local t0=$SECONDS rc
    podman stop -t 20 "$(ctr edge)" >"$LOGS/stop-edge.log" 2>&1 || { cat "$LOGS/stop-edge.log" >&2; return 1; }
    rc=$(podman inspect --format '{{.State.ExitCode}}' "$(ctr edge)")
    if ((SECONDS - t0 < 20)) && [[ $rc != 137 ]]; then
        ok "the edge stopped on SIGTERM in $((SECONDS - t0)) s (exit $rc)"
    else
        bad "the edge did not stop on SIGTERM: $((SECONDS - t0)) s, exit $rc (137 = killed after the grace period)"
    fi
}

# --- run ------------------------------------------------------------------------------------------------
step "tools: podman, buildah, debootstrap (apt-get), podman-compose (PyPI)" tools
step "base system for stand-ins: debootstrapped Debian $SUITE" base
step "upstream base images (pulled, or stand-ins from Debian's packages)" base_images
step "build $ORIGIN_IMAGE (Dockerfile, target origin)" build_image "$ORIGIN_IMAGE" Dockerfile origin origin
step "build $EDGE_IMAGE (deploy/edge.Dockerfile, target edge)" build_image "$EDGE_IMAGE" deploy/edge.Dockerfile edge edge
step "image hygiene: non-root, no toolchain, size, ENTRYPOINT, HEALTHCHECK, no baked secrets" hygiene
step "secrets only from the environment: compose config refuses to start without them" secrets_required
step "ports and secrets of this run" prepare_run
step "stack up in depends_on order, every healthcheck green within its start_period" stack_up
step "a shopper: token, SKU through the admin API, purchase through the edge, replay" shopper
step "Prometheus: both origins scraped and up, metrics through its API, dashboard queries" prometheus
step "reconcile with compose run" reconcile
step "kill a Redis node mid-sale: the sale goes on" kill_redis
step "stop origin-2 mid-sale (SIGTERM): no decided purchase lost, origin-1 serves" stop_origin
step "the edge stops on SIGTERM" stop_edge
