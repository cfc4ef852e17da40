#!/usr/bin/env node
// The waiting room's fairness benchmark: thousands of simulated shoppers against the BUILT worker
// in workerd in front of the REAL origin (the e2e harness, edge/e2e/harness.mjs: a fresh
// database, the origin binary and `wrangler dev` on free ports). Not a CI test: a run takes
// five to seven minutes on 2 cores and its figures go to docs/benchmarks.md ("Waiting room fairness").
//
//   scripts/edge-build.sh && cargo build -p origin     (once)
//   node bench/room/fairness.mjs                       (defaults: 5,000 shoppers, 40 % pre-queue, 1,800/min)
//   node bench/room/fairness.mjs --help
//
// What it does: puts a SKU on sale with `starts_at` a little ahead and a waiting room; a share
// of the shoppers join before the start (the pre-queue), paced evenly over the time before it;
// the rest join after the start, one at a time at an even pace (so their join order is exact).
// Every shopper then polls `GET /v1/queue/{sku}` (with its join receipt) until it is admitted — at the start (spread
// over 2 s) for the pre-queue, then at half its estimated wait, between 0.25 s and 30 s, so the
// moment of admission is bracketed tightly near the front of the line without 5,000 shoppers
// polling every few hundred milliseconds. Requests are bounded (--concurrency in flight), 429
// and 503 are retried after their Retry-After, network errors after 1 s.
//
// Reported (the room's admission instant of each shopper is read from its pass,
// `p1.<kid>.<expires_ms>.<mac>`, minus pass_secs; what the shoppers saw is checked against it):
// - Spearman's rho between pre-queue join order and admission order (goal |rho| < 0.05), from
//   the room's instants and from the first answer each shopper saw admitted;
// - whether post-start admission order equals join order: every consecutive pair of post-start
//   joiners admitted in join order, and no later joiner SEEN admitted before an earlier one was
//   seen still waiting (a "proven inversion"); the whole pre-queue before any post-start joiner;
// - admissions per minute over 60 s windows (sliding by 5 s) while the line was not empty,
//   against the setting (goal within ±5 %), also from the room's own `admitted` counter (stats
//   endpoint, sampled every second); the most admitted in any one second (smoothness);
// - per Durable Object: requests and peak requests per second (`GET /v1/queue/{sku}/stats`).
import { writeFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { cpus, loadavg } from "node:os";
import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";

import { ADMIN_TOKEN, ROOT, SECRETS, Stack, tokenFor, unique } from "../../edge/e2e/harness.mjs";

const { values: opt } = parseArgs({
  options: {
    shoppers: { type: "string", default: "5000" },
    "pre-share": { type: "string", default: "0.4" },
    "admit-per-minute": { type: "string", default: "1800" },
    "pass-secs": { type: "string", default: "600" },
    "pre-secs": { type: "string", default: "80" },
    "post-secs": { type: "string", default: "60" },
    "post-concurrency": { type: "string", default: "8" },
    concurrency: { type: "string", default: "64" },
    "max-secs": { type: "string", default: "400" },
    buyers: { type: "string", default: "20" },
    out: { type: "string", default: join(ROOT, "docs/bench/room-fairness.txt") },
    "edge-url": { type: "string" },
    "origin-url": { type: "string" },
    help: { type: "boolean", default: false },
  },
});
if (opt.help) {
  console.log(`node bench/room/fairness.mjs [--shoppers 5000] [--pre-share 0.4] [--admit-per-minute 1800]
  [--pass-secs 600] [--pre-secs 80] [--post-secs 60] [--post-concurrency 8] [--concurrency 64] [--max-secs 400]
  [--buyers 20] [--out docs/bench/room-fairness.txt]   (--out - : print only)
  [--edge-url URL --origin-url URL]   use a running stack (with the e2e harness's secrets) instead of starting one`);
  process.exit(0);
}
const N = Number(opt.shoppers);
const PRE = Math.round(N * Number(opt["pre-share"]));
const RATE = Number(opt["admit-per-minute"]);
const PRE_MS = Number(opt["pre-secs"]) * 1000;
const POST_MS = Number(opt["post-secs"]) * 1000;
const POST_CONCURRENCY = Number(opt["post-concurrency"]);
const CONCURRENCY = Number(opt.concurrency);
const MAX_MS = Number(opt["max-secs"]) * 1000;
const command = `node bench/room/fairness.mjs ${process.argv.slice(2).join(" ")}`.trim();

// ---- bounded, retrying HTTP -------------------------------------------------------------------

let inFlight = 0;
const waiting = [];
const acquire = () => (inFlight < CONCURRENCY ? (inFlight += 1, Promise.resolve()) : new Promise((ok) => waiting.push(ok)));
const release = () => {
  const next = waiting.shift();
  if (next) next();
  else inFlight -= 1;
};
const statuses = new Map();
const count = (k) => statuses.set(k, (statuses.get(k) ?? 0) + 1);

/**
 * One call through the edge, retried on 429/503 (after Retry-After) and network errors (after
 * 1 s); returns { status, json, at } of the final answer (`at`: when it arrived, ms).
 */
async function call(method, url, headers) {
  for (let attempt = 0; ; attempt += 1) {
    await acquire();
    let r;
    try {
      const res = await fetch(url, { method, headers });
      const text = await res.text();
      r = { status: res.status, retryAfter: res.headers.get("retry-after"), text, at: Date.now() };
    } catch (e) {
      r = { status: 0, error: String(e), at: Date.now() };
    } finally {
      release();
    }
    count(`${method} ${r.status}`);
    if (r.status === 429 || r.status === 503 || r.status === 0) {
      if (attempt >= 30) throw new Error(`${method} ${url}: gave up after ${attempt} retries (${r.status} ${r.text ?? r.error})`);
      const secs = r.status === 0 ? 1 : Math.min(30, Math.max(0.2, Number(r.retryAfter) || 1));
      await sleep(secs * 1000 * (1 + Math.random() * 0.2));
      continue;
    }
    let json;
    try {
      json = JSON.parse(r.text);
    } catch {
      json = undefined;
    }
    return { status: r.status, json, at: r.at, text: r.text };
  }
}

// ---- statistics -------------------------------------------------------------------------------

/** Ranks (1-based) with ties given their average rank. */
function ranks(xs) {
  const idx = xs.map((x, i) => [x, i]).sort((a, b) => a[0] - b[0]);
  const out = new Array(xs.length);
  for (let i = 0; i < idx.length; ) {
    let j = i;
    while (j + 1 < idx.length && idx[j + 1][0] === idx[i][0]) j += 1;
    for (let k = i; k <= j; k += 1) out[idx[k][1]] = (i + j) / 2 + 1;
    i = j + 1;
  }
  return out;
}
function pearson(a, b) {
  const n = a.length;
  const ma = a.reduce((s, x) => s + x, 0) / n;
  const mb = b.reduce((s, x) => s + x, 0) / n;
  let sab = 0, saa = 0, sbb = 0;
  for (let i = 0; i < n; i += 1) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) ** 2;
    sbb += (b[i] - mb) ** 2;
  }
  return sab / Math.sqrt(saa * sbb);
}
const spearman = (a, b) => pearson(ranks(a), ranks(b));

// ---- the run ----------------------------------------------------------------------------------

const lines = [];
const out = (s = "") => {
  lines.push(s);
  console.log(s);
};

const external = Boolean(opt["edge-url"] && opt["origin-url"]);
const stack = new Stack();
let stopping = false;
const stop = async () => {
  if (stopping || external) return;
  stopping = true;
  await stack.stop();
};
process.on("SIGINT", () => stop().then(() => process.exit(130)));

try {
  const setupStarted = Date.now();
  // The room signs passes with ROOM_SECRETS (the harness's, when it has them).
  if (external) {
    stack.edgeUrl = opt["edge-url"];
    stack.originUrl = opt["origin-url"];
  } else await stack.start(SECRETS.ROOM_SECRETS ? {} : { ROOM_SECRETS: "b1:bench-room-secret-0123456789abcdef" });
  const edge = stack.edgeUrl;
  const sku = unique("ROOM");
  const startMs = Math.ceil((Date.now() + PRE_MS) / 1000) * 1000;
  const startsAt = new Date(startMs).toISOString().replace(".000Z", "Z");
  const put = await fetch(`${stack.originUrl}/v1/admin/skus/${sku}`, {
    method: "PUT",
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({
      name: "Fairness run",
      price_cents: 100,
      stock: N,
      max_per_user: 1,
      starts_at: startsAt,
      waiting_room: { admit_per_minute: RATE, pass_secs: Number(opt["pass-secs"]) },
    }),
  });
  if (put.status !== 200) throw new Error(`PUT ${sku}: ${put.status} ${await put.text()}`);
  const view = await put.json();
  if (!view.waiting_room) throw new Error(`the SKU view has no waiting_room: ${JSON.stringify(view)} (is the room merged?)`);
  const warm = await stack.warmup([sku]);
  if (warm.status !== 200) throw new Error(`warmup: ${warm.status} ${warm.text}`);
  console.error(`stack up in ${((Date.now() - setupStarted) / 1000).toFixed(1)} s; ${sku} starts at ${startsAt}`);

  const queueUrl = `${edge}/v1/queue/${encodeURIComponent(sku)}`;
  const shoppers = Array.from({ length: N }, (_, i) => ({
    i,
    pre: i < PRE,
    user: `fair-${i}-${unique("u")}`,
    token: null,
    joinSent: 0,
    joinedAt: 0,
    joinPosition: null,
    receipt: null, // sent back with each poll (Flashgate-Queue-Receipt): the edge answers alone
    lastWaiting: 0, // last answer that said "not admitted" (ms)
    admittedAt: 0, // first answer that said "admitted" (ms)
    pass: null,
    polls: 0,
    error: null,
  }));
  for (const s of shoppers) s.token = tokenFor(s.user, 3600);

  // Stats sampler: the room's own counters, every second.
  const samples = [];
  const statsUrl = `${queueUrl}/stats`;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      try {
        const res = await fetch(statsUrl, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
        if (res.status === 200) samples.push({ at: Date.now(), ...(await res.json()) });
        else count(`stats ${res.status}`);
      } catch {
        count("stats error");
      }
      await sleep(5000); // each sample asks every object: keep it light
    }
  })();

  const auth = (s) => ({ authorization: `Bearer ${s.token}` });
  const pollHeaders = (s) => (s.receipt ? { ...auth(s), "flashgate-queue-receipt": s.receipt } : auth(s));
  const see = (s, r) => {
    if (r.status !== 200 || !r.json) {
      s.error = `${r.status} ${r.text}`;
      return false;
    }
    const a = r.json;
    if (typeof a.receipt === "string") s.receipt = a.receipt;
    if (a.admitted) {
      if (!s.admittedAt) {
        s.admittedAt = r.at;
        s.pass = a.pass ?? null;
      }
    } else s.lastWaiting = Math.max(s.lastWaiting, r.at);
    return true;
  };

  /** Joins; the answer (null: refused, recorded as the shopper's error). */
  async function joinLine(s) {
    s.joinSent = Date.now();
    const j = await call("POST", queueUrl, auth(s));
    s.joinedAt = j.at;
    if (j.status === 200 && j.json) s.joinPosition = j.json.position;
    return see(s, j) ? j.json : null;
  }

  /** Polls until admitted: at the start (spread over 2 s) before it, then at half the estimate. */
  async function pollUntilAdmitted(s, last) {
    const deadline = startMs + MAX_MS;
    while (!s.admittedAt && Date.now() < deadline) {
      const now = Date.now();
      const est = last.estimated_wait_secs ?? 5;
      const delay = now < startMs ? startMs - now + Math.random() * 2000 : est <= 1 ? 250 : Math.min(30_000, est * 500);
      await sleep(delay);
      const r = await call("GET", queueUrl, pollHeaders(s));
      s.polls += 1;
      if (!see(s, r)) return;
      last = r.json;
    }
    if (!s.admittedAt && !s.error) s.error = "not admitted before --max-secs";
  }
  const failedWith = (s) => (e) => {
    s.error = String(e);
  };

  // Pre-queue: paced evenly over 75 % of the time before the start.
  const t0 = Date.now();
  const preSpan = Math.max(0, (startMs - t0) * 0.75);
  const running = [];
  for (let k = 0; k < PRE; k += 1) {
    const wait = t0 + (preSpan * k) / PRE - Date.now();
    if (wait > 0) await sleep(wait);
    const s = shoppers[k];
    running.push(joinLine(s).then((last) => last && pollUntilAdmitted(s, last)).catch(failedWith(s)));
  }
  // Post-start: at an even pace from 1 s after the start, at most --post-concurrency joins in
  // flight (each join's send and answer instants give the order checked below); each shopper's
  // polling runs on its own.
  await sleep(Math.max(0, startMs + 1000 - Date.now()));
  const post = shoppers.slice(PRE);
  const postStarted = Date.now();
  let nextPost = 0;
  const postJoiner = async () => {
    while (nextPost < post.length) {
      const k = nextPost;
      nextPost += 1;
      const wait = postStarted + (POST_MS * k) / post.length - Date.now();
      if (wait > 0) await sleep(wait);
      const s = post[k];
      const last = await joinLine(s).catch((e) => (failedWith(s)(e), null));
      if (last) running.push(pollUntilAdmitted(s, last).catch(failedWith(s)));
    }
  };
  await Promise.all(Array.from({ length: POST_CONCURRENCY }, postJoiner));
  await Promise.all(running);
  sampling = false;
  await sampler;
  const endedAt = Date.now();

  // A few admitted shoppers buy with their pass; as many try without one.
  const admittedList = shoppers.filter((s) => s.pass).slice(0, Number(opt.buyers));
  const buyStatuses = [];
  for (const s of admittedList) {
    const res = await fetch(`${edge}/v1/purchases`, {
      method: "POST",
      headers: { ...auth(s), "content-type": "application/json", "idempotency-key": unique("k"), "flashgate-pass": s.pass },
      body: JSON.stringify({ sku, qty: 1 }),
    });
    buyStatuses.push(res.status);
  }
  const noPass = [];
  for (const s of shoppers.slice(-Number(opt.buyers))) {
    const res = await fetch(`${edge}/v1/purchases`, {
      method: "POST",
      headers: { ...auth(s), "content-type": "application/json", "idempotency-key": unique("k") },
      body: JSON.stringify({ sku, qty: 1 }),
    });
    const body = await res.json().catch(() => ({}));
    noPass.push(`${res.status} ${body.code ?? ""}`.trim());
  }

  const stats = await (await fetch(statsUrl, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).json().catch(() => null);

  // ---- analysis -------------------------------------------------------------------------------

  const ok = shoppers.filter((s) => s.admittedAt);
  const failed = shoppers.filter((s) => !s.admittedAt);
  // Each admission happened between the last answer that said "waiting" (or the join, or the
  // start: nobody is admitted before it) and the first that said "admitted".
  const lower = (s) => Math.max(s.lastWaiting, s.joinedAt, startMs);
  const mid = (s) => (lower(s) + s.admittedAt) / 2;
  const bracket = (s) => s.admittedAt - lower(s);
  const fmt = (x, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : String(x));
  const pct = (x) => `${(x * 100).toFixed(1)} %`;

  // The room's own admission instant: a pass is `p1.<kid>.<expires_ms>.<mac>`, usable until
  // admission + pass_secs (edge/src/room/pass.rs); null if it does not parse.
  const PASS_MS = Number(opt["pass-secs"]) * 1000;
  const decided = (s) => {
    const m = /^p1\.[^.]+\.(\d+)\.[^.]+$/.exec(s.pass ?? "");
    return m ? Number(m[1]) - PASS_MS : null;
  };
  for (const s of ok) s.decidedAt = decided(s);
  const withDecided = ok.filter((s) => s.decidedAt !== null);
  // A shopper is never seen admitted before the room's instant (same machine's clock; 5 ms of
  // rounding allowed), and never seen waiting long after it (the published state is cached ~1 s).
  const seenEarly = withDecided.filter((s) => s.admittedAt < s.decidedAt - 5).length;
  const staleWaits = withDecided.map((s) => s.lastWaiting - s.decidedAt).filter((d) => d > 0).sort((x, y) => x - y);
  const when = (s) => s.decidedAt ?? mid(s);

  // Pre-queue: those whose join was answered before the start (1 s margin).
  const preq = shoppers.filter((s) => s.pre && s.admittedAt && s.joinedAt > 0 && s.joinedAt < startMs - 1000);
  const lateJoins = shoppers.filter((s) => s.pre && s.joinedAt >= startMs - 1000).length;
  const preJoinOrder = ranks(preq.map((s) => s.joinedAt));
  const rhoDecided = spearman(preJoinOrder, preq.map(when));
  // The first answer that said "admitted" (the pre-queue's first polls after the start are
  // spread at random over 2 s, independently of the join order).
  const rhoObserved = spearman(preJoinOrder, preq.map((s) => s.admittedAt));
  // The share of early joiners (first half by join order) among the first 10 % admitted (50 %
  // if the draw is fair).
  const byAdmission = [...preq].sort((a, b) => when(a) - when(b));
  const firstTenth = byAdmission.slice(0, Math.ceil(preq.length / 10));
  const medianJoin = [...preq].sort((a, b) => a.joinedAt - b.joinedAt)[Math.floor(preq.length / 2)]?.joinedAt ?? 0;
  const earlyShare = firstTenth.filter((s) => s.joinedAt < medianJoin).length / Math.max(1, firstTenth.length);

  // Post-start order. Shopper i certainly joined before j when i's join was answered before j's
  // was sent: then i must be admitted before j. For each j (by send time), the latest admission
  // among all such i must come before j's.
  const postOk = post.filter((s) => s.admittedAt);
  const bySent = [...postOk].sort((a, b) => a.joinSent - b.joinSent);
  const byAnswered = [...postOk].sort((a, b) => a.joinedAt - b.joinedAt);
  const orderCheck = (admitted, seenWaiting) => {
    let violations = 0, worst = 0, p = 0, latest = -Infinity;
    for (const j of bySent) {
      while (p < byAnswered.length && byAnswered[p].joinedAt < j.joinSent) latest = Math.max(latest, admitted(byAnswered[p++]));
      const late = latest - (seenWaiting ? seenWaiting(j) : admitted(j));
      if (late > 0) {
        violations += 1;
        worst = Math.max(worst, late);
      }
    }
    return { violations, worst };
  };
  // The room's instants: an earlier joiner admitted after a later one.
  const postOrder = orderCheck(when);
  // What shoppers saw ("proven inversions"): an earlier joiner still seen waiting after a later
  // one was seen admitted (latest lower bound of the earlier ones vs the later one's upper bound).
  const postSeen = orderCheck(lower, (j) => j.admittedAt);
  const postPairsChecked = bySent.length;
  // The whole pre-queue before the first post-start joiner.
  const lastPre = Math.max(...preq.map(when));
  const firstPost = Math.min(...postOk.map(when));

  // Rate: admissions per 60 s window, sliding by 5 s, from the first admission to the last one
  // (the line was never empty in between: the post-start joiners were all in line before the
  // pre-queue was through).
  const times = ok.map(when).sort((a, b) => a - b);
  const firstAdmission = times[0] ?? startMs;
  const lastAdmission = times[times.length - 1] ?? startMs;
  const countIn = (a, b) => times.filter((t) => t >= a && t < b).length;
  // The line was not empty at t if more shoppers had joined 2 s earlier (a join waits up to a
  // tick to be ranked) than had been admitted by t; only windows with a non-empty line all
  // through count.
  const joins = shoppers.filter((s) => s.joinedAt).map((s) => s.joinedAt).sort((a, b) => a - b);
  const upTo = (xs, t) => {
    let lo = 0, hi = xs.length;
    while (lo < hi) {
      const m = (lo + hi) >> 1;
      if (xs[m] <= t) lo = m + 1;
      else hi = m;
    }
    return lo;
  };
  const busy = (a, b) => {
    for (let t = a; t <= b; t += 500) if (upTo(joins, t - 2000) <= upTo(times, t)) return false;
    return true;
  };
  const windows = [];
  for (let a = firstAdmission; a + 60_000 <= lastAdmission; a += 5000) if (busy(a, a + 60_000)) windows.push({ from: (a - startMs) / 1000, n: countIn(a, a + 60_000) });
  const perMinute = windows.map((w) => w.n);
  const wMean = perMinute.reduce((sum, x) => sum + x, 0) / Math.max(1, perMinute.length);
  const worstDev = perMinute.length ? Math.max(...perMinute.map((x) => Math.abs(x - RATE) / RATE)) : NaN;
  const overall = times.length > 1 ? ((times.length - 1) * 60_000) / (lastAdmission - firstAdmission) : NaN;
  let maxPerSecond = 0;
  for (let k = 0, j = 0; k < times.length; k += 1) {
    while (times[k] - times[j] >= 1000) j += 1;
    maxPerSecond = Math.max(maxPerSecond, k - j + 1);
  }
  const gaps = times.slice(1).map((t, k) => t - times[k]).sort((a, b) => a - b);
  // The room's own counter, sampled every second.
  const sampleAt = (t) => {
    let best = null;
    for (const x of samples) if (x.at <= t) best = x;
    return best;
  };
  const roomWindows = [];
  for (const w of windows) {
    const a = startMs + w.from * 1000;
    const x = sampleAt(a), y = sampleAt(a + 60_000);
    if (x && y && y.at > x.at) roomWindows.push(((y.admitted - x.admitted) * 60_000) / (y.at - x.at));
  }
  const brackets = ok.map(bracket).sort((a, b) => a - b);
  const q = (xs, p) => xs[Math.min(xs.length - 1, Math.floor(p * xs.length))];
  const polls = shoppers.reduce((sum, x) => sum + x.polls, 0);

  // ---- report ---------------------------------------------------------------------------------

  const date = new Date().toISOString().replace(/\.\d+Z$/, "Z");
  out(`# Waiting room fairness — ${date}`);
  out(`command: ${command}`);
  out(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? "?"}), load average at the end ${loadavg().map((x) => x.toFixed(2)).join(" ")}`);
  out(external ? `stack: running at ${stack.edgeUrl} (edge), ${stack.originUrl} (origin)` : `stack: the built worker in workerd (wrangler dev) + the origin (target/debug) + Postgres + Redis, all on this machine`);
  out(`setting: admit_per_minute ${RATE}, pass_secs ${opt["pass-secs"]}; ${N} shoppers: ${PRE} join in the ${PRE_MS / 1000} s before starts_at, ${N - PRE} one at a time over ${POST_MS / 1000} s after it; concurrency ${CONCURRENCY}`);
  out(`run: ${((endedAt - startMs) / 1000).toFixed(1)} s from the start to the last admission seen; ${polls} polls; answers ${[...statuses].map(([k, v]) => `${k}: ${v}`).join(", ")}`);
  out();
  const tally = (xs) => [...xs.reduce((m, x) => m.set(x, (m.get(x) ?? 0) + 1), new Map())].map(([k, v]) => `${v}× ${k}`).join(", ");
  const range = (xs) => (xs.length ? `${fmt(Math.min(...xs), 0)}–${fmt(Math.max(...xs), 0)}` : "n/a (run shorter than a window)");
  const rows = [
    ["admitted", `${ok.length} / ${N}`, `${N}`, ok.length === N ? "ok" : "MISSED"],
    ["admission instants from the passes (p1.<kid>.<expires_ms>)", `${withDecided.length} / ${ok.length}`, "all", withDecided.length === ok.length ? "ok" : "MISSED"],
    ["pre-queue shoppers (join answered ≥ 1 s before starts_at)", `${preq.length} (late: ${lateJoins})`, `${PRE}`, ""],
    ["pre-queue: Spearman rho(join order, admission order)", fmt(rhoDecided, 4), "|rho| < 0.05", Math.abs(rhoDecided) < 0.05 ? "ok" : "MISSED"],
    ["pre-queue: the same, first answer seen admitted", fmt(rhoObserved, 4), "|rho| < 0.05", Math.abs(rhoObserved) < 0.05 ? "ok" : "MISSED"],
    ["pre-queue: early half's share of the first 10 % admitted", pct(earlyShare), "≈ 50 %", ""],
    ["post-start: admitted before someone who joined earlier", `${postOrder.violations} of ${postPairsChecked}`, "0", postOrder.violations === 0 && postPairsChecked > 0 ? "ok" : "MISSED"],
    ["post-start: seen admitted while an earlier joiner was later seen waiting", `${postSeen.violations} (worst by ${postSeen.worst} ms)`, "0", postSeen.violations === 0 ? "ok" : "see text"],
    ["whole pre-queue admitted before the first post-start joiner", lastPre < firstPost ? "yes" : `no (${((lastPre - firstPost) / 1000).toFixed(2)} s overlap)`, "yes", lastPre < firstPost ? "ok" : "MISSED"],
    ["admitted per minute (60 s windows every 5 s)", `${range(perMinute)} (mean ${wMean.toFixed(0)}, ${perMinute.length} windows)`, `${RATE} ± 5 %`, worstDev <= 0.05 ? "ok" : "MISSED"],
    ["admitted per minute, first to last admission", fmt(overall, 0), `${RATE} ± 5 %`, Math.abs(overall - RATE) / RATE <= 0.05 ? "ok" : "MISSED"],
    ["admitted per minute, the room's counter (stats, same windows)", range(roomWindows), `${RATE} ± 5 %`, roomWindows.length && roomWindows.every((x) => Math.abs(x - RATE) / RATE <= 0.05) ? "ok" : "MISSED"],
    ["smoothness: most admitted in any 1 s; gap p1 / p50 / max", `${maxPerSecond}; ${q(gaps, 0.01)} / ${q(gaps, 0.5)} / ${gaps[gaps.length - 1]} ms`, `≤ ${Math.floor(RATE / 60) + 1}; ${(60_000 / RATE).toFixed(0)} ms`, maxPerSecond <= Math.floor(RATE / 60) + 1 ? "ok" : "MISSED"],
    ["seen admitted before the room's instant", String(seenEarly), "0", seenEarly === 0 ? "ok" : "MISSED"],
    ["seen waiting after the room's instant: count, p99, max", `${staleWaits.length}, ${fmt(q(staleWaits, 0.99) / 1000, 2)} s, ${fmt(staleWaits[staleWaits.length - 1] / 1000, 2)} s`, "≤ ~1 s (state cached)", ""],
    ["admission moment bracket (last seen waiting → first seen admitted) p50 / p99", `${(q(brackets, 0.5) / 1000).toFixed(2)} s / ${(q(brackets, 0.99) / 1000).toFixed(2)} s`, "", ""],
    ["purchases with the pass", tally(buyStatuses) || "-", "201", buyStatuses.length && buyStatuses.every((x) => x === 201) ? "ok" : "MISSED"],
    ["purchases without a pass", tally(noPass), "403 not_admitted", noPass.every((x) => x === "403 not_admitted") ? "ok" : "MISSED"],
  ];
  const w0 = Math.max(...rows.map((r) => r[0].length));
  const w1 = Math.max(...rows.map((r) => r[1].length));
  const w2 = Math.max(...rows.map((r) => r[2].length));
  out(`${"figure".padEnd(w0)}  ${"measured".padEnd(w1)}  ${"goal".padEnd(w2)}  verdict`);
  for (const r of rows) out(`${r[0].padEnd(w0)}  ${r[1].padEnd(w1)}  ${r[2].padEnd(w2)}  ${r[3]}`);
  out();
  out("Durable Objects (from GET /v1/queue/{sku}/stats at the end):");
  if (stats?.objects?.length) {
    const objs = [...stats.objects].sort((a, b) => b.peak_requests_per_sec - a.peak_requests_per_sec);
    const wn = Math.max(6, ...objs.map((o) => String(o.name).length));
    out(`  ${"object".padEnd(wn)}  requests  peak requests/s`);
    for (const o of objs) out(`  ${String(o.name).padEnd(wn)}  ${String(o.requests).padStart(8)}  ${String(o.peak_requests_per_sec).padStart(15)}`);
    out(`  peak over all objects: ${objs[0].peak_requests_per_sec} requests/s (${objs[0].name}); room counters: joined ${stats.joined}, admitted ${stats.admitted}, started ${stats.started}`);
  } else out(`  (no objects in the stats answer: ${JSON.stringify(stats)})`);
  out();
  out("admitted per 60 s window with a non-empty line, window start in seconds after starts_at:");
  out(`  ${windows.map((w) => `${w.from.toFixed(1)}s:${w.n}`).join("  ")}`);
  if (failed.length) {
    const why = new Map();
    for (const s of failed) why.set(s.error ?? "?", (why.get(s.error ?? "?") ?? 0) + 1);
    out(`not admitted: ${failed.length}: ${[...why].slice(0, 5).map(([k, v]) => `${v}× ${k}`).join("; ")}`);
  }
  if (opt.out !== "-") {
    mkdirSync(dirname(opt.out), { recursive: true });
    writeFileSync(opt.out, `${lines.join("\n")}\n`);
    console.error(`written to ${opt.out}`);
  }
} finally {
  await stop();
}
