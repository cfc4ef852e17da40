#!/usr/bin/env bash
# Installs what the webhook receiver examples (docs/examples/webhooks/) need, pinned, into
# .tools/webhooks (gitignored): the Standard Webhooks reference libraries — PyPI
# `standardwebhooks` (requirements.txt) into a venv, .tools/webhooks/venv, and npm
# `standardwebhooks` (package.json, package-lock.json: `npm ci`) into .tools/webhooks/node_modules.
# Idempotent; fast once installed. The origin's test `api webhook_consumers` runs both examples as
# real receivers of a live origin with them (scripts/test.sh runs this first and makes that test
# require them: FLASHGATE_WEBHOOK_CONSUMERS=required).
set -euo pipefail
cd "$(dirname "$0")/.."
EXAMPLES=docs/examples/webhooks
DIR=.tools/webhooks

log() { printf '[webhook-consumers] %s\n' "$*" >&2; }
mkdir -p "$DIR"

if [[ ! -x $DIR/venv/bin/python ]]; then
  log "creating $DIR/venv"
  python3 -m venv "$DIR/venv"
fi
if ! "$DIR/venv/bin/python" -m pip freeze --disable-pip-version-check 2>/dev/null |
    grep -qxF -f "$EXAMPLES/requirements.txt"; then
  log "installing $(tr '\n' ' ' <"$EXAMPLES/requirements.txt")(PyPI) into $DIR/venv"
  "$DIR/venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$EXAMPLES/requirements.txt"
fi

if ! cmp -s "$EXAMPLES/package-lock.json" "$DIR/package-lock.json" || [[ ! -d $DIR/node_modules/standardwebhooks ]]; then
  log "installing the npm packages of $EXAMPLES/package-lock.json into $DIR/node_modules (npm ci)"
  cp "$EXAMPLES/package.json" "$EXAMPLES/package-lock.json" "$DIR/"
  (cd "$DIR" && npm ci --silent --no-audit --no-fund)
fi
log "ready: $DIR/venv/bin/python and $DIR/node_modules/standardwebhooks"
