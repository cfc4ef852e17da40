// `bench/edge/cost.mjs`: what one purchase costs the edge, against a trivial request, in one run.
//
// Starts the stack of the edge's end-to-end suite (edge/e2e/harness.mjs: a fresh Postgres
// database, the real origin, the BUILT worker in workerd), puts one SKU on sale (stock far above
// what the run sells, no cap, no rate limit in the way: the edge runs with
// RATE_LIMIT_QUOTA=1000 per 2 s) and warms it up. The worker runs in workerd in each of two ways,
// one after the other (`--runtimes`): `wrangler` — `wrangler dev`, the e2e suite's way, with
// wrangler's proxy workerd in front and the DevTools inspector on (it streams every subrequest's
// events to wrangler's node process) — and `miniflare` — Miniflare alone (edge/e2e/miniflare.mjs):
// the same workerd, wasm, SQLite Durable Objects and Cache API emulation, without the proxy and
// the inspector, which a deployed worker does not have either. Then, per runtime and connection
// mode (cold: each
// shopper's connection opened when the phase starts, inside the measured latency; warm: opened
// before it with a GET /healthz), it alternates phases of N closed-loop shoppers (distinct users)
// hitting
//   - `trivial`: GET /healthz (a static answer: no settings, no I/O), and
//   - `purchase`: POST /v1/purchases, qty 1, a fresh Idempotency-Key each time, through the whole
//     path (token, shields, the user's Durable Object, the signed origin call, the stored answer),
// and reads the CPU time (utime + stime, /proc/<pid>/stat) of the workerd processes of the
// edge's process group (wrangler's or Miniflare's node process and its workerd children) before
// and after each phase. The headline is workerd CPU per
// request, purchase ÷ trivial in the same run: it does not depend on how busy the shared
// machine is, unlike requests/s and latency (printed beside it). The origin's CPU per purchase
// and the edge's node process (wrangler's, or Miniflare's) are printed too, for reference.
//
// Before the phases every shopper buys once (not measured): the worker's wasm is compiled and
// each shopper's Durable Object exists, as in a sale that has been running for a while.
//
//   scripts/edge-build.sh && cargo build --release -p origin
//   E2E_ORIGIN_BIN=target/release/origin node bench/edge/cost.mjs --shoppers 100 --seconds 15
//
// Options: --shoppers N (100), --seconds S per phase (15), --rounds R (2: trivial, purchase,
// trivial, purchase per mode), --runtimes wrangler,miniflare, --connections cold,warm,
// --phases trivial,purchase (`view` adds
// GET /v1/skus/{sku}, mostly a Cache API hit: what one cache read costs). E2E_EDGE_BUILD=<dir> measures another
// build of the worker (a copy of edge/build/), E2E_ORIGIN_BIN another origin binary.
import { Agent, request } from "node:http";
import { execFileSync } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { loadavg } from "node:os";
import { randomBytes } from "node:crypto";

import { Stack, tokenFor, unique } from "../../edge/e2e/harness.mjs";

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? fallback : process.argv[i + 1];
}
const SHOPPERS = Number(option("shoppers", "100"));
const SECONDS = Number(option("seconds", "15"));
const ROUNDS = Number(option("rounds", "2"));
const MODES = option("connections", "cold,warm").split(",");
const RUNTIMES = option("runtimes", "wrangler,miniflare").split(",");
for (const r of RUNTIMES) if (!["wrangler", "miniflare"].includes(r)) throw new Error(`--runtimes: unknown runtime ${r}`);
const PHASES = option("phases", "trivial,purchase").split(",");
const TICKS = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim()) || 100;

// ---- /proc --------------------------------------------------------------------------------------

/** { pid: { ppid, comm, ticks } } of every process. */
function processes() {
  const out = new Map();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const close = stat.lastIndexOf(")");
      const comm = stat.slice(stat.indexOf("(") + 1, close);
      const f = stat.slice(close + 2).split(" ");
      // After ')': state(0) ppid(1) … utime(11) stime(12).
      out.set(Number(name), { ppid: Number(f[1]), comm, ticks: Number(f[11]) + Number(f[12]) });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** CPU seconds used so far by `root` and its descendants, split into workerd and the rest. */
function cpu(root) {
  const procs = processes();
  const inTree = (pid) => {
    for (let p = pid; p > 1; p = procs.get(p)?.ppid ?? 0) if (p === root) return true;
    return false;
  };
  let workerd = 0;
  let other = 0;
  const each = {};
  for (const [pid, p] of procs) {
    if (!inTree(pid)) continue;
    if (p.comm.startsWith("workerd")) workerd += p.ticks;
    else other += p.ticks;
    each[`${p.comm}/${pid}`] = p.ticks / TICKS;
  }
  return { workerd: workerd / TICKS, other: other / TICKS, each };
}

const ownCpu = (pid) => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) / TICKS;
};

// ---- HTTP ---------------------------------------------------------------------------------------

/** One request on `agent`; resolves { status, ms } (status 0: transport error). */
function send(agent, url, { method = "GET", headers = {}, body } = {}) {
  const started = process.hrtime.bigint();
  return new Promise((ok) => {
    const req = request(url, { agent, method, headers }, (res) => {
      res.resume();
      res.on("end", () => ok({ status: res.statusCode, ms: Number(process.hrtime.bigint() - started) / 1e6 }));
      res.on("error", () => ok({ status: 0, ms: 0 }));
    });
    req.on("error", () => ok({ status: 0, ms: 0 }));
    req.end(body);
  });
}

function purchaseOf(edgeUrl, shopper, sku) {
  const body = JSON.stringify({ sku, qty: 1 });
  return (agent) =>
    send(agent, `${edgeUrl}/v1/purchases`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${shopper.token}`,
        "idempotency-key": `k-${randomBytes(8).toString("hex")}`,
        "content-type": "application/json",
        "content-length": Buffer.byteLength(body),
      },
      body,
    });
}

const trivialOf = (edgeUrl) => (agent) => send(agent, `${edgeUrl}/healthz`);
const viewOf = (edgeUrl, sku) => (agent) => send(agent, `${edgeUrl}/v1/skus/${sku}`);

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** One phase on `edge` ({ runtime, url, child }): every shopper sends `call(agent)` in a closed
 * loop for SECONDS. */
async function phase(stack, edge, shoppers, kind, mode, sku) {
  const agents = shoppers.map(() => new Agent({ keepAlive: true, maxSockets: 1 }));
  if (mode === "warm") {
    await Promise.all(agents.map((a) => send(a, `${edge.url}/healthz`)));
  }
  const of = { purchase: (s) => purchaseOf(edge.url, s, sku), trivial: () => trivialOf(edge.url), view: () => viewOf(edge.url, sku) };
  const calls = shoppers.map(of[kind]);
  const latencies = [];
  const statuses = {};
  const before = cpu(edge.child.pid);
  const originBefore = ownCpu(stack.origin.pid);
  const load = loadavg()[0];
  const started = Date.now();
  const deadline = started + SECONDS * 1000;
  await Promise.all(
    calls.map(async (call, i) => {
      while (Date.now() < deadline) {
        const r = await call(agents[i]);
        statuses[r.status] = (statuses[r.status] ?? 0) + 1;
        if (r.status !== 0) latencies.push(r.ms);
      }
    }),
  );
  const elapsed = (Date.now() - started) / 1000;
  const after = cpu(edge.child.pid);
  const originAfter = ownCpu(stack.origin.pid);
  for (const a of agents) a.destroy();
  if (process.env.BENCH_EDGE_PROCESSES) {
    const per = Object.entries(after.each).map(([k, v]) => `${k} ${(((v - (before.each[k] ?? 0)) * 1000) / latencies.length).toFixed(3)}`);
    console.error(`${edge.runtime} ${mode} ${kind}: CPU ms/req per process: ${per.join(", ")}`);
  }
  latencies.sort((a, b) => a - b);
  const n = latencies.length;
  return {
    runtime: edge.runtime,
    kind,
    mode,
    n,
    load,
    perSec: n / elapsed,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    workerdMs: ((after.workerd - before.workerd) * 1000) / n,
    wranglerMs: ((after.other - before.other) * 1000) / n,
    originMs: ((originAfter - originBefore) * 1000) / n,
    statuses,
  };
}

// ---- the run ------------------------------------------------------------------------------------

const EDGE_VARS = {
  RATE_LIMIT_QUOTA: "1000",
  RATE_LIMIT_WINDOW_SECS: "2",
  ORIGIN_TIMEOUT_MS: "8000",
};
const stack = new Stack();
const started = new Date().toISOString();
try {
  await stack.start(EDGE_VARS);
  const sku = await stack.freshSku({ stock: 100_000_000, maxPerUser: 100_000_000 });
  const results = [];
  for (const runtime of RUNTIMES) {
    // The stack's own edge is wrangler's; another runtime gets an edge of its own, and only one
    // edge runs at a time.
    let edge = { runtime: "wrangler", url: stack.edgeUrl, child: stack.edge };
    if (runtime !== "wrangler") {
      await stack.stopEdge();
      const own = await stack.startEdge(EDGE_VARS, runtime, runtime);
      edge = { runtime, url: own.url, child: own.child, stop: own.stop };
    }
    const warm = await stack.warmup([sku], undefined, edge.url);
    if (warm.status !== 200) throw new Error(`warmup (${runtime}): ${warm.status} ${warm.text}`);
    const shoppers = Array.from({ length: SHOPPERS }, () => ({ token: tokenFor(unique("shopper")) }));

    // Not measured: the wasm compiled, every shopper's Durable Object created.
    const primeAgent = new Agent({ keepAlive: true, maxSockets: 16 });
    const primed = await Promise.all(shoppers.map((s) => purchaseOf(edge.url, s, sku)(primeAgent)));
    primeAgent.destroy();
    const bad = primed.filter((r) => r.status !== 201);
    if (bad.length > 0) throw new Error(`priming (${runtime}): ${bad.length} purchases not 201 (${JSON.stringify(bad[0])})\n${stack.logs()}`);

    for (const mode of MODES) {
      for (let round = 0; round < ROUNDS; round += 1) {
        for (const kind of PHASES) {
          const r = await phase(stack, edge, shoppers, kind, mode, sku);
          results.push(r);
          console.error(`${runtime} ${mode} ${kind} round ${round + 1}: ${r.n} requests, ${r.workerdMs.toFixed(3)} workerd ms/req, ${JSON.stringify(r.statuses)}`);
        }
      }
    }
    if (edge.stop) await edge.stop();
  }

  const f = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "–");
  console.log(`\nedge cost: ${SHOPPERS} shoppers, ${SECONDS} s per phase, ${ROUNDS} round(s); started ${started}`);
  console.log(`command: ${process.argv.slice(1).join(" ")} (E2E_EDGE_BUILD=${process.env.E2E_EDGE_BUILD ?? "edge/build"}, E2E_ORIGIN_BIN=${process.env.E2E_ORIGIN_BIN ?? "target/debug/origin"})\n`);
  console.log("| runtime | connections | phase | load avg | requests | req/s | p50 ms | p99 ms | workerd CPU ms/req | node CPU ms/req | origin CPU ms/req | statuses |");
  console.log("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
  for (const r of results) {
    const st = Object.entries(r.statuses).map(([s, n]) => `${s}×${n}`).join(" ");
    console.log(`| ${r.runtime} | ${r.mode} | ${r.kind} | ${f(r.load)} | ${r.n} | ${f(r.perSec)} | ${f(r.p50)} | ${f(r.p99)} | ${f(r.workerdMs, 3)} | ${f(r.wranglerMs, 3)} | ${f(r.originMs, 3)} | ${st} |`);
  }
  console.log("\n| runtime | connections | workerd CPU ms per purchase | per trivial request | purchase ÷ trivial |");
  console.log("|---|---|---:|---:|---:|");
  let failed = false;
  for (const runtime of RUNTIMES) {
    for (const mode of MODES) {
      const of = (kind) => {
        const rs = results.filter((r) => r.runtime === runtime && r.mode === mode && r.kind === kind);
        const n = rs.reduce((a, r) => a + r.n, 0);
        return rs.reduce((a, r) => a + r.workerdMs * r.n, 0) / n;
      };
      const p = of("purchase");
      const t = of("trivial");
      console.log(`| ${runtime} | ${mode} | ${f(p, 3)} | ${f(t, 3)} | ${f(p / t, 2)}× |`);
    }
  }
  for (const r of results) {
    const ok = r.kind === "purchase" ? "201" : "200";
    if (r.kind === "view") continue; // a diagnostic: a view miss may meet the origin's 404/503
    if (Object.keys(r.statuses).some((s) => s !== ok)) failed = true;
  }
  if (failed) {
    console.log("\nsome answers were not the expected status (see the statuses column)");
    process.exitCode = 1;
  }
} finally {
  await stack.stop();
}
