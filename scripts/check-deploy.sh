#!/usr/bin/env bash
# Checks the deployment files without a Docker engine. Idempotent; fast after the first run.
#
#   1. docker-compose.yml against the Compose Specification schema (check-jsonschema 0.39.0,
#      builtin schema vendor.compose-spec, installed from PyPI into .tools/venv), plus what the
#      schema cannot say: every service has a healthcheck, depends_on waits for health, the Redis
#      nodes are independent, the origins list every Redis node, build targets and mounted files
#      exist.
#      The Dockerfiles are parsed with BuildKit's own parser (PyPI `dockerfile`): multi-stage,
#      non-root runtime stages, the origin image carries only the binary.
#   2. Every JSON/YAML file under deploy/ parses; the Grafana dashboard names the provisioned
#      datasource.
#   3. promtool (Debian's `prometheus` package, fetched with `apt-get download` and unpacked into
#      .tools/prometheus; nothing is installed system-wide or started): `check config`,
#      `check rules`, the alert unit tests (deploy/prometheus/alerts.test.yml) and the PromQL
#      syntax of every dashboard query. When promtool cannot be obtained (no apt, no registry)
#      this step is skipped with a notice; origin/tests/deploy.rs still parses the rules and checks
#      every metric name in them and in the dashboard against a live origin's /metrics.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=$ROOT/.tools
VENV=$TOOLS/venv
CHECK_JSONSCHEMA_VERSION=0.39.0
DOCKERFILE_PARSER_VERSION=3.4.0

log() { printf '[check-deploy] %s\n' "$*" >&2; }

# --- tools -----------------------------------------------------------------------------------
if [[ ! -x $VENV/bin/python ]]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
fi
# check-jsonschema (Compose Specification schema) and dockerfile (the official BuildKit
# Dockerfile parser, compiled into the wheel), both from PyPI.
PY_PINS=("check-jsonschema==$CHECK_JSONSCHEMA_VERSION" "dockerfile==$DOCKERFILE_PARSER_VERSION")
if ! "$VENV/bin/python" - "${PY_PINS[@]}" 2>/dev/null <<'PY'
import importlib.metadata as md
import sys

for pin in sys.argv[1:]:
    name, version = pin.split("==")
    if md.version(name) != version:
        sys.exit(1)
PY
then
    log "installing ${PY_PINS[*]} into .tools/venv"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PY_PINS[@]}"
fi

find_promtool() {
    if command -v promtool >/dev/null 2>&1; then
        command -v promtool
    elif [[ -x $TOOLS/prometheus/usr/bin/promtool ]]; then
        echo "$TOOLS/prometheus/usr/bin/promtool"
    fi
}
PROMTOOL=$(find_promtool)
if [[ -z $PROMTOOL ]] && command -v apt-get >/dev/null 2>&1; then
    log "fetching promtool from Debian's prometheus package (apt-get download; nothing installed)"
    dl=$(mktemp -d)
    chmod 0777 "$dl" # apt's _apt user downloads into it
    if ! (cd "$dl" && apt-get download -qq prometheus >/dev/null 2>&1); then
        if [[ $(id -u) == 0 ]]; then
            apt-get update -qq >/dev/null 2>&1 || true
            (cd "$dl" && apt-get download -qq prometheus >/dev/null 2>&1) || true
        fi
    fi
    deb=$(find "$dl" -maxdepth 1 -name "prometheus_*.deb" | head -1)
    if [[ -n $deb ]]; then
        rm -rf "$TOOLS/prometheus"
        mkdir -p "$TOOLS/prometheus"
        dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$TOOLS/prometheus" ./usr/bin/promtool
    fi
    rm -rf "$dl"
    PROMTOOL=$(find_promtool)
fi

checked=()

# --- 1. docker-compose.yml -------------------------------------------------------------------
log "docker-compose.yml: Compose Specification schema (check-jsonschema --builtin-schema vendor.compose-spec)"
"$VENV/bin/check-jsonschema" --builtin-schema vendor.compose-spec docker-compose.yml
checked+=("docker-compose.yml matches the Compose Specification schema")

log "docker-compose.yml: healthchecks, depends_on, Redis independence, build targets, mounts"
"$VENV/bin/python" - <<'PY'
import pathlib
import re
import sys

import dockerfile
from ruamel.yaml import YAML

doc = YAML(typ="safe").load(pathlib.Path("docker-compose.yml").read_text())
services = doc["services"]
problems = []

def env_of(svc):
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return env

if "version" in doc:
    problems.append("top-level 'version' is obsolete in the Compose Specification")

required = {"redis-1", "redis-2", "redis-3", "postgres", "origin-1", "origin-2", "edge", "prometheus", "grafana"}
missing = required - services.keys()
if missing:
    problems.append(f"missing services: {sorted(missing)}")

for name, svc in services.items():
    hc = svc.get("healthcheck")
    if not hc or hc.get("disable") or not hc.get("test"):
        problems.append(f"{name}: no healthcheck")
    deps = svc.get("depends_on") or {}
    if isinstance(deps, list):
        problems.append(f"{name}: depends_on must give a condition")
        deps = {}
    for dep, spec in deps.items():
        if dep not in services:
            problems.append(f"{name}: depends on unknown service {dep}")
        cond = (spec or {}).get("condition")
        # Prometheus waits only for the origins to start: it must scrape (and alert) precisely
        # when an origin is unhealthy.
        allowed = {"service_healthy", "service_started"} if name == "prometheus" else {"service_healthy"}
        if cond not in allowed:
            problems.append(f"{name}: depends_on {dep} has condition {cond!r}, want one of {sorted(allowed)}")
    profiles = svc.get("profiles") or []
    if name in ("prometheus", "grafana") and profiles != ["observability"]:
        problems.append(f"{name}: must be in the observability profile only")
    if name not in ("prometheus", "grafana") and profiles:
        problems.append(f"{name}: core services must not be behind a profile")
    build = svc.get("build")
    if build:
        path = pathlib.Path(build.get("context", ".")) / build.get("dockerfile", "Dockerfile")
        if not path.is_file():
            problems.append(f"{name}: {path} does not exist")
        else:
            target = build.get("target")
            stages = [c.value[2] for c in dockerfile.parse_file(str(path))
                      if c.cmd == "FROM" and len(c.value) == 3 and c.value[1].upper() == "AS"]
            if target and target not in stages:
                problems.append(f"{name}: build target {target!r} not among {stages} in {path}")
    for vol in svc.get("volumes") or []:
        src = vol.split(":", 1)[0] if isinstance(vol, str) else vol.get("source", "")
        if src.startswith("./") and not pathlib.Path(src).exists():
            problems.append(f"{name}: mounted {src} does not exist")

redis_nodes = sorted(n for n in services if re.fullmatch(r"redis-\d+", n))
if len(redis_nodes) < 3 or len(redis_nodes) % 2 == 0:
    problems.append(f"Redlock wants an odd number (>= 3) of Redis nodes, got {redis_nodes}")
for n in redis_nodes:
    cmd = services[n].get("command") or []
    cmd = " ".join(cmd) if isinstance(cmd, list) else str(cmd)
    if re.search(r"replicaof|slaveof|cluster-enabled\s+yes", cmd, re.I):
        problems.append(f"{n}: Redlock nodes must be independent masters ({cmd})")
    if services[n].get("image", "").split(":")[0] != "redis":
        problems.append(f"{n}: not a redis image")
want_urls = [f"redis://{n}:6379" for n in redis_nodes]
origins = sorted(n for n in services if re.fullmatch(r"origin-\d+", n))
if len(origins) < 2:
    problems.append(f"want at least two origin replicas, got {origins}")
ports = []
for n in origins:
    env = env_of(services[n])
    if sorted(str(env.get("REDIS_URLS", "")).split(",")) != want_urls:
        problems.append(f"{n}: REDIS_URLS={env.get('REDIS_URLS')!r}, want every node: {','.join(want_urls)}")
    for var in ("DATABASE_URL", "EDGE_SHARED_SECRET", "ADMIN_TOKEN"):
        if not env.get(var):
            problems.append(f"{n}: {var} not set")
    for var in ("EDGE_SHARED_SECRET", "ADMIN_TOKEN"):
        if not re.fullmatch(r"\$\{" + var + r":\?[^}]+\}", str(env.get(var, ""))):
            problems.append(f"{n}: {var} must be required from the environment (${{{var}:?...}})")
    ports += [str(p).rsplit(":", 1)[0] for p in services[n].get("ports") or []]
if len(ports) != len(set(ports)):
    problems.append(f"origin host ports collide: {ports}")
edge_env = env_of(services.get("edge", {}))
if not str(edge_env.get("ORIGIN_URL", "")).startswith("http://origin-"):
    problems.append(f"edge: ORIGIN_URL={edge_env.get('ORIGIN_URL')!r} does not point at an origin service")

if problems:
    for p in problems:
        print(f"docker-compose.yml: {p}", file=sys.stderr)
    sys.exit(1)
PY
checked+=("docker-compose.yml: healthchecks, depends_on conditions, independent Redis nodes, REDIS_URLS, required secrets, build targets, mounts")

log "Dockerfile, deploy/edge.Dockerfile: parse (BuildKit parser); multi-stage, non-root runtime, origin binary only"
"$VENV/bin/python" - <<'PY'
import sys

import dockerfile

problems = []

def stages(path):
    """[(base image, stage name, [instructions])] of a Dockerfile, parsed by BuildKit's parser."""
    out = []
    for c in dockerfile.parse_file(path):
        if c.cmd == "FROM":
            out.append((c.value[0], c.value[2] if len(c.value) == 3 else None, []))
        elif out:
            out[-1][2].append(c)
    return out

def runtime_checks(path, stage, image_prefix, port):
    base, name, body = stage
    if not base.startswith(image_prefix):
        problems.append(f"{path}: runtime stage {name} is {base}, want {image_prefix}*")
    users = [c.value[0] for c in body if c.cmd == "USER"]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        problems.append(f"{path}: runtime stage {name} must run as a non-root USER (got {users})")
    if not any(c.cmd == "EXPOSE" and port in c.value for c in body):
        problems.append(f"{path}: runtime stage {name} must EXPOSE {port}")
    if not any(c.cmd in ("CMD", "ENTRYPOINT") for c in body):
        problems.append(f"{path}: runtime stage {name} has no CMD/ENTRYPOINT")

origin = stages("Dockerfile")
if len(origin) < 2:
    problems.append("Dockerfile: want a multi-stage build")
else:
    builder = origin[0]
    if not builder[0].startswith("rust:"):
        problems.append(f"Dockerfile: builder is {builder[0]}, want an official rust image")
    if not any(c.cmd == "RUN" and "cargo build --release -p origin --locked" in c.value[0] for c in builder[2]):
        problems.append("Dockerfile: the builder must run `cargo build --release -p origin --locked`")
    final = origin[-1]
    if final[1] != "origin":
        problems.append(f"Dockerfile: the last (default) stage must be `origin`, got {final[1]}")
    runtime_checks("Dockerfile", final, "debian:bookworm-slim", "8080")
    copies = [c for c in final[2] if c.cmd == "COPY"]
    if any(not c.value[0].endswith("/origin") for c in copies):
        problems.append(f"Dockerfile: the runtime stage copies more than the origin binary: {[c.value for c in copies]}")
    env = [c.value for c in final[2] if c.cmd == "ENV"]
    if not any(v[i] == "LISTEN_ADDR" and v[i + 1] == "0.0.0.0:8080" for v in env for i in range(0, len(v) - 1, 2)):
        problems.append("Dockerfile: ENV LISTEN_ADDR=0.0.0.0:8080 missing")

edge = stages("deploy/edge.Dockerfile")
if not edge or edge[-1][1] != "edge":
    problems.append("deploy/edge.Dockerfile: the last stage must be `edge`")
else:
    runtime_checks("deploy/edge.Dockerfile", edge[-1], "node:20", "8787")

for p in problems:
    print(p, file=sys.stderr)
sys.exit(1 if problems else 0)
PY
checked+=("Dockerfile and deploy/edge.Dockerfile parse; multi-stage, non-root runtime stages, EXPOSE, origin binary only")

# --- 2. deploy/ parses -----------------------------------------------------------------------
log "deploy/: every JSON and YAML file parses"
"$VENV/bin/python" - <<'PY'
import json
import pathlib
import sys

from ruamel.yaml import YAML

yaml = YAML(typ="safe")
bad = 0
files = sorted(p for p in pathlib.Path("deploy").rglob("*") if p.suffix in (".json", ".yml", ".yaml"))
for p in files:
    try:
        if p.suffix == ".json":
            json.loads(p.read_text(encoding="utf-8"))
        else:
            yaml.load(p.read_text(encoding="utf-8"))
    except Exception as e:  # noqa: BLE001 - report any parse error
        print(f"{p}: does not parse: {e}", file=sys.stderr)
        bad += 1
if not files:
    print("deploy/: no JSON/YAML files found", file=sys.stderr)
    bad += 1

# The dashboard's panels must name the datasource Grafana is provisioned with.
ds = yaml.load(pathlib.Path("deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
uids = {d["uid"] for d in ds["datasources"]}
dash = json.loads(pathlib.Path("deploy/grafana/lock-health.json").read_text(encoding="utf-8"))
for panel in dash["panels"]:
    if panel.get("type") == "row":
        continue
    uid = panel.get("datasource", {}).get("uid")
    if uid not in uids:
        print(f"lock-health.json: panel {panel.get('title')!r} names datasource {uid!r}, provisioned: {sorted(uids)}", file=sys.stderr)
        bad += 1
    if not panel.get("targets"):
        print(f"lock-health.json: panel {panel.get('title')!r} has no query", file=sys.stderr)
        bad += 1
print(f"{len(files)} files: " + ", ".join(str(p) for p in files), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
checked+=("deploy/: every JSON/YAML parses; dashboard panels use the provisioned datasource")

# --- 3. promtool -----------------------------------------------------------------------------
if [[ -n $PROMTOOL ]]; then
    log "promtool ($("$PROMTOOL" --version 2>&1 | head -1)): config, rules, rule unit tests, dashboard queries"
    "$PROMTOOL" check config deploy/prometheus/prometheus.yml
    "$PROMTOOL" check rules deploy/prometheus/alerts.yml
    "$PROMTOOL" test rules deploy/prometheus/alerts.test.yml
    # Every dashboard query as a recording rule, with Grafana's variables substituted, so that
    # promtool parses its PromQL.
    rules=$(mktemp --suffix=.yml)
    trap 'rm -f "$rules"' EXIT
    "$VENV/bin/python" - "$rules" <<'PY'
import json
import pathlib
import sys

dash = json.loads(pathlib.Path("deploy/grafana/lock-health.json").read_text(encoding="utf-8"))
exprs = []
def walk(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "expr" and isinstance(v, str):
                exprs.append(v)
            else:
                walk(v)
    elif isinstance(node, list):
        for v in node:
            walk(v)
walk(dash.get("panels", []))
subst = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h", "$instance": ".*"}
rules = []
for i, e in enumerate(exprs):
    for k, v in subst.items():
        e = e.replace(k, v)
    rules.append({"record": f"flashgate:dashboard_query:{i}", "expr": e})
pathlib.Path(sys.argv[1]).write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
print(f"{len(rules)} dashboard queries", file=sys.stderr)
PY
    "$PROMTOOL" check rules "$rules" | sed 's|'"$rules"'|deploy/grafana/lock-health.json (queries)|'
    checked+=("promtool: prometheus.yml, alerts.yml, alerts.test.yml unit tests, dashboard PromQL")
else
    log "NOTICE: promtool not obtainable here (no apt-get or no registry); skipped promtool checks."
    log "        origin/tests/deploy.rs still checks alerts.yml and the dashboard against a live origin."
    checked+=("promtool: SKIPPED (not obtainable)")
fi

log "checked:"
for c in "${checked[@]}"; do
    log "  - $c"
done
