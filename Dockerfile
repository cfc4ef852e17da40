# syntax=docker/dockerfile:1.7
#
# The Flashgate origin, as a small non-root image:
#
#   docker build -t flashgate/origin .
#   docker run --rm -p 8080:8080 -e DATABASE_URL=... -e REDIS_URLS=... \
#       -e EDGE_SHARED_SECRET=... -e ADMIN_TOKEN=... flashgate/origin
#   docker run --rm -e DATABASE_URL=... flashgate/origin reconcile    # check the books
#
# Secrets may come from files instead of the environment (NAME_FILE, e.g. Docker or Kubernetes
# secrets mounted under /run/secrets): -e EDGE_SHARED_SECRET_FILE=/run/secrets/edge_shared_secret
# (every secret: docs/configuration.md).
#
# docker-compose.yml builds it for origin-1 and origin-2. Configuration:
# docs/configuration.md; migrations are compiled into the binary and applied at startup
# unless RUN_MIGRATIONS=false.

########## build ##########
FROM rust:1.95-bookworm AS builder
WORKDIR /src
COPY . .
# SQL is checked at compile time against the committed origin/.sqlx/, without a database.
ENV SQLX_OFFLINE=true
# The cache mounts keep the registry and the target dir between builds (BuildKit); the binary
# is copied out of the cached target dir because cache mounts are not part of the layer. The
# release profile keeps line tables for profiling (Cargo.toml); the image drops them with the
# rest of the debug info (the binary goes from 73 MB to 14 MB) and keeps the symbols, so a
# backtrace still names its functions.
# The cache mount outlives the build context: a checkout whose files are older than the cached
# artifacts (another branch, a fresh clone, COPY keeps mtimes) would pass cargo's freshness check
# and ship a stale binary. The workspace's own files are made newer than anything cached, so only
# the dependencies' artifacts are reused (found by scripts/check-containers.sh).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    find Cargo.toml Cargo.lock shared redlock origin -type f -exec touch {} + \
 && cargo build --release -p origin --locked \
 && install -m 0755 target/release/origin /usr/local/bin/origin \
 && strip --strip-debug /usr/local/bin/origin

########## runtime ##########
FROM debian:bookworm-slim AS origin
# ca-certificates for TLS peers; curl for the health check (the slim image has none).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 flashgate \
 && useradd --system --uid 10001 --gid flashgate --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin flashgate
COPY --from=builder /usr/local/bin/origin /usr/local/bin/origin
USER 10001:10001
ENV LISTEN_ADDR=0.0.0.0:8080 \
    LOG_FORMAT=json \
    RUST_LOG=info
EXPOSE 8080
# 200 once Postgres and a Redlock quorum answer (compose declares its own, same check).
HEALTHCHECK --interval=5s --timeout=3s --start-period=20s --retries=5 \
    CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8080/readyz"]
# The origin handles SIGTERM itself (graceful shutdown), so it runs as PID 1 directly.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/origin"]
CMD ["serve"]
