// Test harness of the edge end-to-end suite: a fresh Postgres database, the real origin binary and
// the BUILT worker in workerd (`wrangler dev` with the [build]-less config), each on a free port,
// each in its own process group so that stopping kills every child (node, esbuild, workerd×2).
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { createHash, createHmac, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, openSync, readFileSync, existsSync } from "node:fs";
import { createServer } from "node:net";
import { createServer as createHttpServer, request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
/** The built worker (its directory, with the [build]-less wrangler.toml) and the origin binary;
 * the edge benchmark (bench/edge/cost.mjs) points them elsewhere to compare two builds. */
const EDGE_BUILD = resolve(ROOT, process.env.E2E_EDGE_BUILD ?? "edge/build");
const ORIGIN_BIN = resolve(ROOT, process.env.E2E_ORIGIN_BIN ?? "target/debug/origin");

export const SESSION_SECRET = "e2e-session-secret-0123456789";
export const EDGE_SHARED_SECRET = "e2e-edge-shared-secret-0123456789";
export const ADMIN_TOKEN = "e2e-admin-token-0123456789";
/** The waiting room's secret (passes, receipts, the pre-queue lottery) and its key id. */
export const ROOM_SECRET = "e2e-room-secret-0123456789";
export const ROOM_KID = "r1";
/** The proof-of-work secret (ALTCHA challenges' HMAC key) and its key id. */
export const POW_SECRET = "e2e-pow-secret-0123456789";
export const POW_KID = "p1";
/** Key ids of the suite's session and edge secrets (the rotatable list forms). */
export const SESSION_KID = "s1";
export const EDGE_KID = "e1";
/** The suite's secret settings, shared by the edge and the origin. */
export const SECRETS = {
  SESSION_SECRETS: `${SESSION_KID}:${SESSION_SECRET}`,
  EDGE_SHARED_SECRETS: `${EDGE_KID}:${EDGE_SHARED_SECRET}`,
  ADMIN_TOKENS: ADMIN_TOKEN,
  ROOM_SECRETS: `${ROOM_KID}:${ROOM_SECRET}`,
  POW_SECRETS: `${POW_KID}:${POW_SECRET}`,
};
/** The rate limit the suite runs the edge with: 50 per hour, so a burst admits exactly 50. */
export const RATE_QUOTA = 50;
export const RATE_WINDOW_SECS = 3600;

export async function freePort() {
  return new Promise((ok, fail) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", fail);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => ok(port));
    });
  });
}

function psql(sql) {
  execFileSync("psql", ["-h", "127.0.0.1", "-U", "postgres", "-v", "ON_ERROR_STOP=1", "-qc", sql], {
    stdio: ["ignore", "ignore", "inherit"],
  });
}

async function waitFor(url, what, child, logFile, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) {
      throw new Error(`${what} exited with ${child.exitCode}:\n${tail(logFile)}`);
    }
    try {
      const r = await fetch(url);
      if (r.ok) return;
    } catch {
      // not up yet
    }
    await sleep(100);
  }
  throw new Error(`${what} not ready after ${timeoutMs} ms:\n${tail(logFile)}`);
}

function tail(file, n = 40) {
  try {
    return readFileSync(file, "utf8").split("\n").slice(-n).join("\n");
  } catch {
    return "(no log)";
  }
}

/** Starts `cmd` in its own process group, logging to `logFile`. */
function startGroup(cmd, args, env, logFile) {
  const fd = openSync(logFile, "a");
  const child = spawn(cmd, args, { cwd: ROOT, env: { ...process.env, ...env }, detached: true, stdio: ["ignore", fd, fd] });
  return child;
}

async function stopGroup(child) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((ok) => child.once("exit", ok));
  try {
    process.kill(-child.pid, "SIGTERM");
  } catch {
    return;
  }
  const killed = await Promise.race([exited.then(() => true), sleep(5_000).then(() => false)]);
  if (!killed) {
    try {
      process.kill(-child.pid, "SIGKILL");
    } catch {
      // already gone
    }
    await exited;
  }
}

/** The whole stack: database, origin, edge. */
export class Stack {
  /** Starts the stack; `edgeOverrides` are extra vars of the suite's edge (e.g. a short SKU_CACHE_TTL_SECS). */
  async start(edgeOverrides = {}) {
    for (const built of [join(EDGE_BUILD, "wrangler.toml"), join(EDGE_BUILD, "index_bg.wasm"), ORIGIN_BIN]) {
      if (!existsSync(built)) {
        throw new Error(`${built} missing: build first (scripts/test-edge.sh builds everything)`);
      }
    }
    this.dir = mkdtempSync(join(tmpdir(), "flashgate-edge-e2e-"));
    this.db = `flashgate_edge_e2e_${randomBytes(6).toString("hex")}`;
    psql(`CREATE DATABASE ${this.db}`);
    this.originPort = await freePort();
    this.originUrl = `http://127.0.0.1:${this.originPort}`;
    this.originLog = join(this.dir, "origin.log");
    await this.startOrigin();

    const edge = await this.startEdge({ ORIGIN_URL: this.originUrl, ...edgeOverrides }, "wrangler");
    this.edge = edge.child;
    this.edgeUrl = edge.url;
    this.edgeLog = edge.log;
  }

  /**
   * Starts (another) edge in workerd with the suite's settings (in front of the suite's origin)
   * plus `overrides`, fresh state: through `wrangler dev` (the suite's way), or with
   * `runtime = "miniflare"` through Miniflare alone (edge/e2e/miniflare.mjs: no dev proxy, no
   * inspector; the edge benchmark measures both). `build`: another build of the worker (a copy
   * of edge/build/), for a benchmark comparing two builds in one run.
   * Returns { url, log, child, stop() }.
   */
  async startEdge(overrides, label, runtime = "wrangler", build = EDGE_BUILD) {
    const port = await freePort();
    const inspectorPort = await freePort();
    const log = join(this.dir, `${label}.log`);
    const vars = {
      ORIGIN_URL: this.originUrl,
      ...SECRETS,
      // The single forms, passed empty (= unset), as scripts/edge-dev.sh does.
      SESSION_SECRET: "",
      EDGE_SHARED_SECRET: "",
      ADMIN_TOKEN: "",
      ROOM_SECRET: "",
      POW_SECRET: "",
      RATE_LIMIT_QUOTA: String(RATE_QUOTA),
      RATE_LIMIT_WINDOW_SECS: String(RATE_WINDOW_SECS),
      // Joins and polls: the suites poll every 150-200 ms; room.test.mjs checks the limit itself.
      QUEUE_RATE_LIMIT_QUOTA: "1000",
      ORIGIN_TIMEOUT_MS: "3000",
      ...overrides,
    };
    if (runtime === "miniflare") {
      const args = [
        join(ROOT, "edge/e2e/miniflare.mjs"),
        "--build", build,
        "--port", String(port),
        "--persist", join(this.dir, `${label}-state`),
        "--vars", JSON.stringify(vars),
      ];
      const child = startGroup(process.execPath, args, {}, log);
      return this.#ready(child, `http://127.0.0.1:${port}`, log, `miniflare (${label})`);
    }
    const args = [
      "dev",
      "--config", join(build, "wrangler.toml"),
      "--ip", "127.0.0.1",
      "--port", String(port),
      "--inspector-port", String(inspectorPort),
      "--persist-to", join(this.dir, `${label}-state`),
      "--show-interactive-dev-session=false",
      "--log-level", "warn",
      ...Object.entries(vars).flatMap(([k, v]) => ["--var", `${k}:${v}`]),
    ];
    const child = startGroup(join(ROOT, "node_modules/.bin/wrangler"), args, { WRANGLER_SEND_METRICS: "false" }, log);
    return this.#ready(child, `http://127.0.0.1:${port}`, log, `wrangler dev (${label})`);
  }

  /** Waits for a started edge's /healthz; stops it if it does not come up. */
  async #ready(child, url, log, what) {
    try {
      await waitFor(`${url}/healthz`, what, child, log);
    } catch (e) {
      await stopGroup(child);
      throw e;
    }
    return { url, log, child, stop: () => stopGroup(child) };
  }

  /**
   * Starts the origin on its port; `overrides` replace the suite's settings (e.g. a rotated
   * EDGE_SHARED_SECRETS). Waits for /readyz.
   */
  async startOrigin(overrides = {}) {
    this.origin = startGroup(
      ORIGIN_BIN,
      [],
      {
        DATABASE_URL: `postgres://postgres@127.0.0.1:5432/${this.db}`,
        REDIS_URLS: process.env.E2E_REDIS_URLS ?? "redis://127.0.0.1:6379",
        REDIS_KEY_PREFIX: `e2e-${this.db}`,
        LISTEN_ADDR: `127.0.0.1:${this.originPort}`,
        EDGE_SHARED_SECRETS: SECRETS.EDGE_SHARED_SECRETS,
        ADMIN_TOKENS: SECRETS.ADMIN_TOKENS,
        // Empty = unset: a single form inherited from the caller's shell would conflict.
        EDGE_SHARED_SECRET: "",
        ADMIN_TOKEN: "",
        LOG_FORMAT: "json",
        ...overrides,
      },
      this.originLog,
    );
    await waitFor(`${this.originUrl}/readyz`, "origin", this.origin, this.originLog);
  }

  /** Restarts the origin with `overrides` (a rolling restart of a one-origin deployment). */
  async restartOrigin(overrides = {}) {
    await this.stopOrigin();
    await this.startOrigin(overrides);
  }

  async stopOrigin() {
    await stopGroup(this.origin);
  }

  /** Stops the suite's edge (the one `start` started). */
  async stopEdge() {
    await stopGroup(this.edge);
  }

  async stop() {
    await stopGroup(this.edge);
    await stopGroup(this.origin);
    if (this.db) {
      try {
        psql(`DROP DATABASE IF EXISTS ${this.db} WITH (FORCE)`);
      } catch (e) {
        console.error(`could not drop ${this.db}: ${e}`);
      }
    }
    if (this.dir && !process.env.E2E_KEEP) rmSync(this.dir, { recursive: true, force: true });
  }

  logs() {
    return `--- wrangler ---\n${tail(this.edgeLog)}\n--- origin ---\n${tail(this.originLog)}`;
  }

  // ---- origin helpers -------------------------------------------------------------------------

  async putSku(sku, { stock, maxPerUser = 1000, price = 1999, name = `Item ${sku}`, adminToken = ADMIN_TOKEN, holdSecs }) {
    const body = { name, price_cents: price, stock, max_per_user: maxPerUser };
    if (holdSecs !== undefined) body.hold_secs = holdSecs;
    return this.putSkuBody(sku, body, adminToken);
  }

  /** `PUT /v1/admin/skus/{sku}` on the origin with a raw body (a sale, or schedule/room fields only); the view. */
  async putSkuBody(sku, body, adminToken = ADMIN_TOKEN) {
    const r = await fetch(`${this.originUrl}/v1/admin/skus/${sku}`, {
      method: "PUT",
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    if (r.status !== 200) throw new Error(`PUT sku ${sku}: ${r.status} ${await r.text()}`);
    return r.json();
  }

  /** A demo sale of `sku` on the origin, any admin field overridden (starts_at, proof_of_work, …); its name. */
  async putSale(sku, fields = {}) {
    await this.putSkuBody(sku, { name: "Demo sneaker", price_cents: 9900, stock: 10, max_per_user: 5, ...fields });
    return sku;
  }

  /** A fresh SKU (a unique name) put on sale on the origin with `opts` (see `putSku`); its name. */
  async freshSku(opts) {
    const name = unique("SKU");
    await this.putSku(name, opts);
    return name;
  }

  async originSku(sku) {
    const r = await fetch(`${this.originUrl}/v1/skus/${sku}`);
    return { status: r.status, body: await r.json() };
  }

  /**
   * `POST /v1/purchases` straight to the origin, signed (v2) like the suite's edge signs: a
   * purchase the origin decides and stores without any edge's Durable Object knowing it (as when
   * the edge's record was purged after its retention, or its `finish` was lost).
   */
  async originPurchase({ user, key, body }) {
    const text = JSON.stringify(body);
    const t = String(now());
    const hash = createHash("sha256").update(text).digest("hex");
    const net = (x) => `${Buffer.byteLength(x)}:${x},`;
    const signed = ["flashgate-signature-v2", t, EDGE_KID, "POST", "/v1/purchases", user, key, hash].map(net).join("");
    const v2 = createHmac("sha256", EDGE_SHARED_SECRET).update(signed).digest("hex");
    const r = await fetch(`${this.originUrl}/v1/purchases`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "idempotency-key": key,
        "flashgate-user": user,
        "flashgate-signature": `t=${t},kid=${EDGE_KID},v2=${v2}`,
      },
      body: text,
    });
    return response(r);
  }

  /** `origin_edge_signatures_total{scheme,kid}` samples on the origin's /metrics, as { "v2/e1": n }. */
  async originSignatures() {
    const text = await (await fetch(`${this.originUrl}/metrics`)).text();
    const out = {};
    for (const line of text.split("\n")) {
      const m = line.match(/^origin_edge_signatures_total\{(?=[^}]*scheme="([^"]*)")(?=[^}]*kid="([^"]*)")[^}]*\}\s+([0-9.eE+-]+)/);
      if (m) out[`${m[1]}/${m[2]}`] = Number(m[3]);
    }
    return out;
  }

  /** Sum of every `origin_purchase_requests_total` sample on the origin's /metrics. */
  async originPurchaseCalls() {
    const text = await (await fetch(`${this.originUrl}/metrics`)).text();
    let sum = 0;
    let seen = false;
    for (const line of text.split("\n")) {
      const m = line.match(/^origin_purchase_requests_total(?:\{[^}]*\})?\s+([0-9.eE+-]+)/);
      if (m) {
        sum += Number(m[1]);
        seen = true;
      }
    }
    if (!seen && !text.includes("origin_purchase_requests_total")) {
      throw new Error("origin /metrics has no origin_purchase_requests_total");
    }
    return sum;
  }

  // ---- edge helpers ---------------------------------------------------------------------------

  async purchase({ token, key, body, headers = {}, edgeUrl = this.edgeUrl }) {
    const h = { "content-type": "application/json", ...headers };
    if (token !== undefined) h.authorization = `Bearer ${token}`;
    if (key !== undefined) h["idempotency-key"] = key;
    const r = await fetch(`${edgeUrl}/v1/purchases`, {
      method: "POST",
      headers: h,
      body: typeof body === "string" ? body : JSON.stringify(body),
    });
    return response(r);
  }

  /** `GET /v1/orders/{id}` (`cancel`: `POST /v1/orders/{id}/cancel`) through the edge as `token`'s shopper. */
  async order(id, { token, cancel = false, edgeUrl = this.edgeUrl } = {}) {
    const headers = token === undefined ? {} : { authorization: `Bearer ${token}` };
    const path = `/v1/orders/${id}${cancel ? "/cancel" : ""}`;
    return response(await fetch(`${edgeUrl}${path}`, { method: cancel ? "POST" : "GET", headers }));
  }

  async get(path, headers = {}, edgeUrl = this.edgeUrl) {
    return response(await fetch(`${edgeUrl}${path}`, { headers }));
  }

  async warmup(skus, token = ADMIN_TOKEN, edgeUrl = this.edgeUrl) {
    const q = skus.map((s) => `sku=${encodeURIComponent(s)}`).join("&");
    const headers = token === null ? {} : { authorization: `Bearer ${token}` };
    return this.get(`/warmup?${q}`, headers, edgeUrl);
  }
}

/**
 * A request to `url` sent from the local address `from` (any 127.0.0.0/8 address works on
 * loopback), so the edge sees it coming from that network: workerd sets `CF-Connecting-IP` from
 * the connection as Cloudflare does. Answers like `response` (status, headers, text, json).
 */
export function requestFrom(from, url, { method = "GET", headers = {}, body } = {}) {
  return new Promise((ok, fail) => {
    const req = httpRequest(url, { method, headers, localAddress: from, agent: false }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString();
        let json;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        ok({ status: res.statusCode, headers: new Headers(Object.entries(res.headers).map(([k, v]) => [k, String(v)])), text, json });
      });
      res.on("error", fail);
    });
    req.on("error", fail);
    if (body !== undefined) req.write(typeof body === "string" ? body : JSON.stringify(body));
    req.end();
  });
}

/** Reads an answer once: its status, headers, text and JSON (when the body is JSON). */
export async function response(r) {
  const text = await r.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: r.status, headers: r.headers, text, json };
}

/**
 * An HTTP pass-through in front of the real origin, for an edge started with its `url` as
 * ORIGIN_URL: it counts the requests it forwards (`count("GET /v1/skus/A")`) and can hold the
 * origin's answers to some of them until the test releases them (`hold(predicate)` returns
 * { arrived: Promise, release() }), which makes "answered after something else happened" exact.
 */
export async function originProxy(targetUrl) {
  const counts = new Map();
  const received = new Map();
  const holds = [];
  const srv = createHttpServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const path = req.url.split("?")[0];
    const name = `${req.method} ${path}`;
    counts.set(name, (counts.get(name) ?? 0) + 1);
    if (!received.has(name)) received.set(name, []);
    received.get(name).push({ headers: { ...req.headers } });
    const headers = {};
    for (const [k, v] of Object.entries(req.headers)) {
      if (!["host", "connection", "content-length", "transfer-encoding", "keep-alive"].includes(k)) headers[k] = v;
    }
    try {
      const r = await fetch(`${targetUrl}${req.url}`, {
        method: req.method,
        headers,
        body: ["GET", "HEAD"].includes(req.method) ? undefined : Buffer.concat(chunks),
      });
      const body = Buffer.from(await r.arrayBuffer());
      const hold = holds.find((h) => !h.taken && h.matches(req.method, path));
      if (hold) {
        hold.taken = true;
        hold.arrivedOk({ status: r.status, body: body.toString() });
        await hold.released;
      }
      const out = {};
      r.headers.forEach((v, k) => {
        if (!["connection", "content-length", "transfer-encoding", "keep-alive", "content-encoding"].includes(k)) out[k] = v;
      });
      res.writeHead(r.status, out);
      res.end(body);
    } catch (e) {
      res.writeHead(502);
      res.end(String(e));
    }
  });
  await new Promise((ok) => srv.listen(0, "127.0.0.1", ok));
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    count: (name) => counts.get(name) ?? 0,
    /** The requests forwarded as `name` ("POST /v1/purchases"), oldest first: { headers }. */
    requests: (name) => received.get(name) ?? [],
    /** Holds the origin's answer to the next request matching (method, path). */
    hold(matches) {
      const h = { matches, taken: false };
      h.arrived = new Promise((ok) => (h.arrivedOk = ok));
      h.released = new Promise((ok) => (h.release = ok));
      holds.push(h);
      return { arrived: h.arrived, release: () => h.release() };
    },
    close: () => {
      for (const h of holds) h.release?.();
      srv.closeAllConnections();
      return new Promise((ok) => srv.close(ok));
    },
  };
}

/** A TCP server that accepts connections and never answers: an origin that hangs. */
export async function blackHole() {
  const sockets = new Set();
  const srv = createServer((sock) => {
    sockets.add(sock);
    sock.on("close", () => sockets.delete(sock));
    sock.on("error", () => {});
  });
  await new Promise((ok) => srv.listen(0, "127.0.0.1", ok));
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    connections: () => sockets.size,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise((ok) => srv.close(ok));
    },
  };
}

// ---- tokens -------------------------------------------------------------------------------------

const b64url = (x) => Buffer.from(typeof x === "string" ? x : JSON.stringify(x)).toString("base64url");

/** An HS256 JWT; `kid` (optional) names the session key in its header. */
export function jwt(claims, { secret = SESSION_SECRET, kid, header = { alg: "HS256", typ: "JWT", ...(kid ? { kid } : {}) } } = {}) {
  const input = `${b64url(header)}.${b64url(claims)}`;
  const sig = createHmac("sha256", secret).update(input).digest("base64url");
  return `${input}.${sig}`;
}

export const now = () => Math.floor(Date.now() / 1000);

/** A waiting-room pass as the edge signs it (`p1.<kid>.<expires_ms>.<sig>`), for any user, SKU and expiry. */
export function mintPass({ sku, user, expiresMs, secret = ROOM_SECRET }) {
  const parts = ["p1", ROOM_KID, sku, user, String(expiresMs)];
  const mac = createHmac("sha256", secret);
  for (const p of parts) mac.update(`${Buffer.byteLength(p)}:${p},`);
  return `p1.${ROOM_KID}.${expiresMs}.${Buffer.from(mac.digest()).toString("base64url")}`;
}

/** RFC 3339 (UTC, whole seconds, rounded down) of the unix instant `ms`. */
export const rfc3339 = (ms) => new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(".000Z", "Z");

export function tokenFor(sub, ttl = 3600) {
  return jwt({ sub, iat: now(), exp: now() + ttl });
}

/** Asserts an answer `r` (see `response`) is problem+json with `status` and `code`. */
export function assertProblem(r, status, code, context = "") {
  const where = `${context} → ${r.status} ${r.text}`;
  assert.equal(r.status, status, where);
  assert.match(r.headers.get("content-type") ?? "", /^application\/problem\+json/, where);
  assert.equal(r.json?.code, code, where);
}

let counter = 0;
/** A name unique in this run (users, SKUs, keys). */
export function unique(prefix) {
  counter += 1;
  return `${prefix}-${process.pid}-${counter}-${randomBytes(3).toString("hex")}`;
}
