#!/usr/bin/env node
// How fast headless Chromium solves the edge's proof of work: SHA-256 candidates per second of
// ALTCHA's own v1 solver (`altcha-lib`'s `solveChallenge`: one `crypto.subtle.digest` per
// candidate, in the page's main thread, as the ALTCHA widget runs it without workers), on
// challenges shaped like the edge's (a ~100-byte salt `<24 hex>?kid=…&purpose=purchase&sku=…&
// user=…&expires=…&`). `bench scalpers --honest-hashes-per-sec` takes this rate as the pace of an
// honest shopper's browser (its default is a run of this script; see docs/benchmarks.md).
//
//   node bench/scalpers/pow-rate.mjs                 (defaults: 5 challenges of 200,000 candidates)
//   node bench/scalpers/pow-rate.mjs --number 300000 --runs 7 --workers 1
//
// Prints one JSON line: {"hashes_per_sec": <median>, "runs": [...], "chromium": "<version>", …}.
// Chromium is Debian's (/usr/bin/chromium, or $CHROMIUM) with a fresh --user-data-dir; the page
// and the library are served from a loopback server started here.
import { createServer } from "node:http";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir, loadavg, cpus } from "node:os";
import { join, resolve, dirname, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import puppeteer from "puppeteer-core";
import { createChallenge } from "altcha-lib/v1";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const LIB = join(ROOT, "node_modules/altcha-lib/dist/esm/v1");

const { values: opt } = parseArgs({
  options: {
    number: { type: "string", default: "200000" },
    runs: { type: "string", default: "5" },
    // 0: the main thread (altcha-lib's solveChallenge); 1: one Web Worker (altcha-lib's worker.js).
    workers: { type: "string", default: "0" },
    help: { type: "boolean", default: false },
  },
});
if (opt.help) {
  console.log("node bench/scalpers/pow-rate.mjs [--number N] [--runs R] [--workers 0|1]");
  process.exit(0);
}
const number = Number(opt.number);
const runs = Number(opt.runs);
const workers = Number(opt.workers);

const PAGE = `<!doctype html><meta charset="utf-8"><title>pow rate</title>
<script type="module">
import { solveChallenge } from "/altcha/index.js";
window.solveMain = async (c) => {
  const t0 = performance.now();
  const s = await solveChallenge(c.challenge, c.salt, c.algorithm, c.maxnumber).promise;
  return { number: s && s.number, ms: performance.now() - t0 };
};
window.solveWorker = (c) => new Promise((ok) => {
  const w = new Worker("/altcha/worker.js", { type: "module" });
  const t0 = performance.now();
  w.onmessage = (m) => { w.terminate(); ok({ number: m.data && m.data.number, ms: performance.now() - t0 }); };
  w.postMessage({ type: "work", payload: { algorithm: c.algorithm, challenge: c.challenge, max: c.maxnumber, salt: c.salt, start: 0 } });
});
window.ready = true;
</script>`;

const server = createServer((req, res) => {
  const path = new URL(req.url, "http://x").pathname;
  if (path === "/") {
    res.writeHead(200, { "content-type": "text/html" });
    return res.end(PAGE);
  }
  if (path.startsWith("/altcha/")) {
    const file = normalize(join(LIB, path.slice("/altcha/".length)));
    if (file.startsWith(LIB)) {
      try {
        const body = readFileSync(file);
        res.writeHead(200, { "content-type": "text/javascript" });
        return res.end(body);
      } catch {
        // fall through to 404
      }
    }
  }
  res.writeHead(404);
  res.end();
});
await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
const url = `http://127.0.0.1:${server.address().port}/`;

const profile = mkdtempSync(join(tmpdir(), "pow-rate-chromium-"));
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    `--user-data-dir=${profile}`,
  ],
});
try {
  const page = await browser.newPage();
  await page.goto(url);
  await page.waitForFunction("window.ready === true");
  const results = [];
  for (let i = 0; i < runs; i += 1) {
    // Shaped like the edge's: 24 hex, the binding, ALTCHA's `&` delimiter (~100 bytes).
    const c = await createChallenge({
      hmacKey: "pow-rate",
      number,
      maxnumber: number,
      params: { kid: "p1", purpose: "purchase", sku: "SCALP-ON-0a1b2c3d", user: `honest-${i}` },
      expires: new Date(Date.now() + 120_000),
    });
    const fn = workers > 0 ? "solveWorker" : "solveMain";
    const got = await page.evaluate((f, ch) => window[f](ch), fn, c);
    if (got.number !== number) throw new Error(`run ${i}: solved ${got.number}, want ${number}`);
    // Candidates 0..=number were tried.
    results.push({ candidates: number + 1, ms: Math.round(got.ms), hashes_per_sec: Math.round(((number + 1) * 1000) / got.ms) });
  }
  const rates = results.map((r) => r.hashes_per_sec).sort((a, b) => a - b);
  console.log(
    JSON.stringify({
      hashes_per_sec: rates[Math.floor(rates.length / 2)],
      solver: workers > 0 ? "altcha-lib v1 worker.js (one Web Worker)" : "altcha-lib v1 solveChallenge (main thread)",
      chromium: await browser.version(),
      loadavg: loadavg().map((l) => l.toFixed(2)),
      cpu: cpus()[0]?.model,
      runs: results,
    }),
  );
} finally {
  await browser.close();
  server.close();
  rmSync(profile, { recursive: true, force: true });
}
