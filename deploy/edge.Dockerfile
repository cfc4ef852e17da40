# syntax=docker/dockerfile:1.7
#
# The Flashgate edge worker served by `wrangler dev` (workerd, local mode) in a Node 20 image,
# for docker-compose.yml. Build context: the repository root.
#
# The worker is Rust compiled to wasm, so it cannot be built in a bare Node image: the builder
# stage is the official Rust image with Node 20 copied in, and runs exactly what a developer
# runs (scripts/edge-toolchain.sh: wasm32 target, worker-build, wasm-bindgen-cli, `npm ci`;
# scripts/edge-build.sh --wasm-only). The runtime stage is node:20-bookworm-slim with only
# node_modules and edge/build. The first build takes ~10 minutes on 2 cores (cargo install of
# worker-build and wasm-bindgen-cli); later builds reuse the layer.

FROM node:20-bookworm AS node

########## build ##########
FROM rust:1.95-bookworm AS builder
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules /usr/local/lib/node_modules
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
 && node --version && npm --version
WORKDIR /src
# Toolchain first (depends only on the lockfiles and the script), so source edits keep it cached.
COPY Cargo.lock package.json package-lock.json ./
COPY scripts/edge-toolchain.sh scripts/
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    bash scripts/edge-toolchain.sh
COPY . .
# The workspace's own files newer than the cache mount's artifacts: an older checkout would pass
# for fresh and build a stale or mixed worker (see the Dockerfile).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    find Cargo.toml Cargo.lock shared edge -type f -exec touch {} + \
 && bash scripts/edge-build.sh --wasm-only \
 && test -f edge/build/index.js && test -f edge/build/wrangler.toml
# The runtime needs only wrangler (and what it depends on) from node_modules: binaryen (wasm-opt,
# 104 MB) is a build tool and puppeteer-core a test driver. Removed from the tree, not from the
# lockfile (--no-save): 366 MB -> 206 MB.
RUN npm uninstall --no-save --no-audit --no-fund binaryen puppeteer-core \
 && test ! -e node_modules/binaryen && node_modules/.bin/wrangler --version

########## runtime ##########
FROM node:20-bookworm-slim AS edge
WORKDIR /app
RUN chown node:node /app
COPY --from=builder --chown=node:node /src/package.json /src/package-lock.json ./
COPY --from=builder --chown=node:node /src/node_modules ./node_modules
COPY --from=builder --chown=node:node /src/edge/build ./edge/build
USER node
ENV WRANGLER_SEND_METRICS=false \
    EDGE_PORT=8787 \
    ORIGIN_URL=http://origin-1:8080
EXPOSE 8787
HEALTHCHECK --interval=5s --timeout=3s --start-period=30s --retries=5 \
    CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.EDGE_PORT||8787)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# Same flags as scripts/edge-dev.sh, listening on all interfaces; secrets come from the
# environment (SESSION_SECRET, EDGE_SHARED_SECRET, ADMIN_TOKEN; optional ROOM_SECRET, POW_SECRET,
# empty = unset), never from the image.
CMD ["sh", "-c", "exec node_modules/.bin/wrangler dev --config edge/build/wrangler.toml --ip 0.0.0.0 --port \"$EDGE_PORT\" --show-interactive-dev-session=false --var \"ORIGIN_URL:$ORIGIN_URL\" --var \"SESSION_SECRET:$SESSION_SECRET\" --var \"EDGE_SHARED_SECRET:$EDGE_SHARED_SECRET\" --var \"ADMIN_TOKEN:$ADMIN_TOKEN\" --var \"ROOM_SECRET:${ROOM_SECRET:-}\" --var \"POW_SECRET:${POW_SECRET:-}\""]
