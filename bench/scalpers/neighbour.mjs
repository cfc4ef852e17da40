// `bench/scalpers/neighbour.mjs`: what one capped account hammering from a /24 costs its
// neighbours, with the bound per network on (issue 35). Each Worker instance lets one request per
// network at a time through; before issue 35 a neighbour who found that slot taken was answered
// `429 network_limit` ("busy") at once, so a hammering account made its neighbours' purchases
// fail. Since, a request waits for the slot in the network's line, one place per account.
//
// Starts the e2e suite's stack (edge/e2e/harness.mjs: a fresh database, the real origin, the
// BUILT worker in workerd) with the production rate limit (RATE_LIMIT_QUOTA 5 per 10 s), and
// for each build of the worker (`--builds name=dir,…`, default `new=edge/build`), in alternating
// rounds so both meet the same machine: a fresh SKU (stock far above what the run sells,
// max_per_user 1, network_limits.units 1,000,000: the bound itself never refuses, only the slot
// can), one hammering account that already bought its unit (so every attempt of it is refused
// by its own gate: purchase_limit or rate_limited) firing `--hammer` requests at once in a loop
// from 127.A.1.2, and a neighbour — a fresh account per attempt, one attempt every
// `--every-ms` — buying from 127.A.1.3 of the same /24, for `--seconds`. It reports per build
// the neighbour's answers, their busy share (429 network_limit, "another request from your
// network is being decided") and latency, and the hammer's answers.
//
//   bash scripts/edge-build.sh && cargo build -p origin
//   node bench/scalpers/neighbour.mjs --builds old=/path/to/old/edge/build,new=edge/build
//
// Options: --seconds S (20), --rounds R (2), --hammer N concurrent requests (4), --every-ms (200),
// --runtime wrangler|miniflare (wrangler: the e2e suite's way).
import { loadavg } from "node:os";
import { resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import { ROOT, Stack, requestFrom, tokenFor, unique } from "../../edge/e2e/harness.mjs";

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? fallback : process.argv[i + 1];
}
const SECONDS = Number(option("seconds", "20"));
const ROUNDS = Number(option("rounds", "2"));
const HAMMER = Number(option("hammer", "4"));
const EVERY_MS = Number(option("every-ms", "200"));
const RUNTIME = option("runtime", "wrangler");
const BUILDS = option("builds", "new=edge/build")
  .split(",")
  .map((b) => {
    const [name, dir] = b.split("=");
    return { name, dir: resolve(ROOT, dir) };
  });

const buy = (edge, from, sku, token) =>
  requestFrom(from, `${edge}/v1/purchases`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${token}`, "idempotency-key": unique("k") },
    body: { sku, qty: 1 },
  }).catch((e) => ({ status: 0, text: String(e), headers: new Headers(), json: undefined }));

const label = (r) => `${r.status}${r.json?.code ? ` ${r.json.code}` : ""}${r.json?.code === "network_limit" && r.headers.get("retry-after") === "1" ? " (busy)" : ""}`;

function count(map, key) {
  map[key] = (map[key] ?? 0) + 1;
}

const quantile = (sorted, q) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] : NaN);

/** One round of `build` on a fresh SKU and a fresh /24 (127.`octet`.1.0/24). */
async function round(stack, edge, octet) {
  const sku = unique("NEIGH");
  await stack.putSkuBody(sku, { name: "Shoe", price_cents: 1999, stock: 1_000_000, max_per_user: 1, network_limits: { units: 1_000_000, window_secs: 3600 } });
  const w = await stack.warmup([sku], undefined, edge);
  if (w.status !== 200) throw new Error(`warmup: ${w.status} ${w.text}`);
  const hammerFrom = `127.${octet}.1.2`;
  const neighbourFrom = `127.${octet}.1.3`;
  const hammerToken = tokenFor(unique("hammer"));
  const first = await buy(edge, hammerFrom, sku, hammerToken);
  if (first.status !== 201) throw new Error(`the hammer's own unit: ${first.status} ${first.text}`);
  const until = Date.now() + SECONDS * 1000;
  const hammer = {};
  const loops = Array.from({ length: HAMMER }, async () => {
    while (Date.now() < until) count(hammer, label(await buy(edge, hammerFrom, sku, hammerToken)));
  });
  const neighbour = {};
  const latencies = [];
  await sleep(500);
  while (Date.now() < until - 500) {
    const started = Date.now();
    const r = await buy(edge, neighbourFrom, sku, tokenFor(unique("neighbour")));
    latencies.push(Date.now() - started);
    count(neighbour, label(r));
    await sleep(Math.max(0, EVERY_MS - (Date.now() - started)));
  }
  await Promise.all(loops);
  return { neighbour, latencies, hammer };
}

const stack = new Stack();
await stack.start({ RATE_LIMIT_QUOTA: "5", RATE_LIMIT_WINDOW_SECS: "10" });
const results = Object.fromEntries(BUILDS.map((b) => [b.name, { neighbour: {}, latencies: [], hammer: {} }]));
const load = [loadavg()[0].toFixed(2)];
try {
  let octet = 40;
  for (let r = 0; r < ROUNDS; r += 1) {
    for (const build of BUILDS) {
      const edge = await stack.startEdge({ RATE_LIMIT_QUOTA: "5", RATE_LIMIT_WINDOW_SECS: "10" }, `${build.name}-${r}`, RUNTIME, build.dir);
      try {
        const got = await round(stack, edge.url, octet);
        octet += 1;
        const into = results[build.name];
        for (const [k, v] of Object.entries(got.neighbour)) into.neighbour[k] = (into.neighbour[k] ?? 0) + v;
        for (const [k, v] of Object.entries(got.hammer)) into.hammer[k] = (into.hammer[k] ?? 0) + v;
        into.latencies.push(...got.latencies);
        console.error(`round ${r + 1}, ${build.name}: neighbour ${JSON.stringify(got.neighbour)}`);
      } finally {
        await edge.stop();
      }
    }
  }
} finally {
  await stack.stop();
}
load.push(loadavg()[0].toFixed(2));

console.log(`# bench/scalpers/neighbour.mjs`);
console.log(`${ROUNDS} round(s) of ${SECONDS} s per build, alternating; the hammer: ${HAMMER} requests at once, in a loop; the neighbour: one fresh account every ${EVERY_MS} ms; edge RATE_LIMIT 5 per 10 s, ${RUNTIME}; load average (1 min) ${load[0]} before, ${load[1]} after\n`);
console.log(`| build | neighbour attempts | 201 | busy (429 network_limit, Retry-After: 1) | busy share | other | neighbour p50 / p99 | hammer requests |`);
console.log(`|---|---:|---:|---:|---:|---|---|---:|`);
for (const { name } of BUILDS) {
  const { neighbour, latencies, hammer } = results[name];
  const attempts = Object.values(neighbour).reduce((a, b) => a + b, 0);
  const ok = neighbour["201"] ?? 0;
  const busy = Object.entries(neighbour).filter(([k]) => k.endsWith("(busy)")).reduce((a, [, v]) => a + v, 0);
  const other = Object.entries(neighbour).filter(([k]) => k !== "201" && !k.endsWith("(busy)"));
  latencies.sort((a, b) => a - b);
  const hammered = Object.values(hammer).reduce((a, b) => a + b, 0);
  console.log(
    `| ${name} | ${attempts} | ${ok} | ${busy} | ${((100 * busy) / Math.max(1, attempts)).toFixed(1)} % | ${other.map(([k, v]) => `${k}: ${v}`).join(", ") || "-"} | ${quantile(latencies, 0.5)} / ${quantile(latencies, 0.99)} ms | ${hammered} |`,
  );
}
for (const { name } of BUILDS) console.log(`\n${name}: hammer's answers ${JSON.stringify(results[name].hammer)}`);
