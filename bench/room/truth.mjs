#!/usr/bin/env node
// The waiting room that tells the truth (issue 36), measured: simulated shoppers against the
// BUILT worker in workerd in front of the REAL origin (the e2e harness). Not a CI test; its
// figures go to docs/benchmarks.md ("Waiting room: the truth it tells").
//
//   scripts/edge-build.sh && cargo build -p origin     (once)
//   node bench/room/truth.mjs                          (defaults below; --help)
//
// A SKU with `--units` units and a waiting room (`--admit-per-minute`, `--overbook`,
// `--pass-secs`); `--shoppers` join one after another over `--join-secs`, each then polls
// `GET /v1/queue/{sku}` with its receipt at the edge's hint (`retry_after_secs`, at most 1 s
// here so that the moment a shopper sees something is bracketed within a second). A shopper
// admitted buys one unit at once with a probability of `--buy-share` (the others are no-shows,
// their passes expire). Reported:
// - estimated wait: each shopper's predicted admission instant at its first answer with an exact
//   place (join answer + `estimated_wait_secs`) against the room's own admission instant (its
//   pass's expiry − pass_secs): p50/p90 absolute error, and as a share of the actual wait;
// - sold-out seen: from the last unit's 201 (the commit, as the buyer saw it) to each shopper
//   still in line seeing `phase: "sold_out"`: p50 / p99 / max;
// - passes issued after the sell-out (admission instant after the last unit's 201): must be 0;
// - no-shows: the share of passes that bought nothing;
// - position: polls whose position rose against the same shopper's previous poll (from its
//   first exact place on), and those that rose from the join answer (before the settle).
import { parseArgs } from "node:util";
import { loadavg } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";

import { ADMIN_TOKEN, Stack, tokenFor, unique } from "../../edge/e2e/harness.mjs";

const { values: opt } = parseArgs({
  options: {
    shoppers: { type: "string", default: "300" },
    units: { type: "string", default: "60" },
    "admit-per-minute": { type: "string", default: "600" },
    overbook: { type: "string", default: "1.5" },
    "pass-secs": { type: "string", default: "15" },
    "join-secs": { type: "string", default: "10" },
    "buy-share": { type: "string", default: "0.8" },
    "max-secs": { type: "string", default: "180" },
    help: { type: "boolean", default: false },
  },
});
if (opt.help) {
  console.log("node bench/room/truth.mjs [--shoppers 300] [--units 60] [--admit-per-minute 600] [--overbook 1.5] [--pass-secs 15] [--join-secs 10] [--buy-share 0.8] [--max-secs 180]");
  process.exit(0);
}
const N = Number(opt.shoppers);
const PASS_SECS = Number(opt["pass-secs"]);
const command = `node bench/room/truth.mjs ${process.argv.slice(2).join(" ")}`.trim();

const pct = (xs, p) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const secs = (ms) => `${(ms / 1000).toFixed(2)} s`;

const stack = new Stack();
const started = Date.now();
try {
  await stack.start();
  const sku = unique("TRUTH");
  const put = await fetch(`${stack.originUrl}/v1/admin/skus/${sku}`, {
    method: "PUT",
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({
      name: "Truth run", price_cents: 100, stock: Number(opt.units), max_per_user: 1,
      waiting_room: { admit_per_minute: Number(opt["admit-per-minute"]), pass_secs: PASS_SECS, overbook: Number(opt.overbook) },
    }),
  });
  if (put.status !== 200) throw new Error(`PUT: ${put.status} ${await put.text()}`);
  const warm = await stack.warmup([sku]);
  if (warm.status !== 200) throw new Error(`warmup: ${warm.status}`);
  const url = `${stack.edgeUrl}/v1/queue/${sku}`;
  const loads = [];
  const loadTimer = setInterval(() => loads.push(loadavg()[0]), 5_000);

  let soldAt = null; // when the last unit's 201 arrived
  const shoppers = [];
  const live = async (s) => {
    const headers = { authorization: `Bearer ${s.token}` };
    const deadline = started + Number(opt["max-secs"]) * 1000;
    for (;;) {
      if (Date.now() > deadline) return;
      const res = await fetch(url, { headers: { ...headers, "flashgate-queue-receipt": s.receipt } });
      if (res.status !== 200) { await sleep(1000); continue; }
      const a = await res.json();
      const at = Date.now();
      s.receipt = a.receipt;
      const placed = a.receipt.split(".")[7] !== "-";
      if (a.phase === "waiting") {
        if (placed && s.predicted === undefined) s.predicted = at + a.estimated_wait_secs * 1000;
        if (placed && s.lastPos !== undefined && a.position > s.lastPos) s.rose += 1;
        if (placed) s.lastPos = a.position;
        if (!placed && a.position < s.joinPos) s.provisionalLower = true;
        if (placed && a.position > s.joinPos) s.roseFromJoin = true;
      }
      if (a.phase === "sold_out") {
        s.soldOutSeen = at;
        if (!a.may_return) return;
      }
      if (a.admitted && a.pass) {
        s.admittedAt = Date.parse(a.pass_expires_at) - PASS_SECS * 1000;
        s.pass = a.pass;
        if (Math.random() < Number(opt["buy-share"])) {
          const r = await stack.purchase({ token: s.token, key: unique("k"), body: { sku, qty: 1 }, headers: { "flashgate-pass": a.pass } });
          s.bought = r.status === 201;
          if (r.status === 201 && r.json.remaining === 0) soldAt = Date.now();
        }
        return;
      }
      if (a.phase === "expired") return;
      await sleep(Math.min(1, a.retry_after_secs) * 1000);
    }
  };
  const gap = (Number(opt["join-secs"]) * 1000) / N;
  const runs = [];
  for (let i = 0; i < N; i += 1) {
    const user = unique("shopper");
    const s = { i, user, token: tokenFor(user), rose: 0 };
    const res = await fetch(url, { method: "POST", headers: { authorization: `Bearer ${s.token}` } });
    const a = await res.json();
    s.joinedAt = Date.now();
    s.receipt = a.receipt;
    s.joinPos = a.position;
    shoppers.push(s);
    runs.push(live(s));
    await sleep(gap);
  }
  await Promise.all(runs);
  clearInterval(loadTimer);

  const admitted = shoppers.filter((s) => s.admittedAt !== undefined);
  const predicted = admitted.filter((s) => s.predicted !== undefined && s.admittedAt > s.joinedAt + 2_000);
  const errors = predicted.map((s) => Math.abs(s.predicted - s.admittedAt));
  const shares = predicted.map((s) => Math.abs(s.predicted - s.admittedAt) / Math.max(1, s.admittedAt - s.joinedAt));
  const inLine = soldAt === null ? [] : shoppers.filter((s) => s.admittedAt === undefined && s.joinedAt < soldAt);
  const seen = inLine.filter((s) => s.soldOutSeen !== undefined).map((s) => s.soldOutSeen - soldAt);
  const after = soldAt === null ? [] : admitted.filter((s) => s.admittedAt > soldAt);
  const noShows = admitted.filter((s) => !s.bought).length;
  const lines = [
    `# ${command}`,
    `# ${new Date().toISOString()}; load average during the run ${Math.min(...loads).toFixed(1)}–${Math.max(...loads).toFixed(1)}`,
    `shoppers ${N}, units ${opt.units}, admit_per_minute ${opt["admit-per-minute"]}, overbook ${opt.overbook}, pass_secs ${PASS_SECS}, buy share ${opt["buy-share"]}`,
    `admitted ${admitted.length}; bought ${admitted.filter((s) => s.bought).length}; no-shows ${noShows} (${((100 * noShows) / Math.max(1, admitted.length)).toFixed(1)} % of passes)`,
    `estimated wait (${predicted.length} shoppers who waited > 2 s): |error| p50 ${secs(pct(errors, 50))}, p90 ${secs(pct(errors, 90))}; as a share of the actual wait p50 ${(100 * pct(shares, 50)).toFixed(1)} %, p90 ${(100 * pct(shares, 90)).toFixed(1)} %`,
    soldAt === null ? "never sold out" : `sold-out seen by ${seen.length} of ${inLine.length} in line: p50 ${secs(pct(seen, 50))}, p99 ${secs(pct(seen, 99))}, max ${secs(Math.max(...seen))}`,
    `passes issued after the last unit's 201: ${after.length}`,
    `polls whose exact position rose: ${shoppers.reduce((n, s) => n + s.rose, 0)}; shoppers whose first exact position was above their join answer's: ${shoppers.filter((s) => s.roseFromJoin).length}`,
  ];
  console.log(lines.join("\n"));
} finally {
  await stack.stop();
}
