#!/usr/bin/env node
// ALTCHA's proof of work v2 (`PBKDF2/SHA-256`, issue 38) beside v1: how fast an honest shopper's
// headless Chromium and a farm's native core get through the same bits of work.
//
// - Honest: altcha-lib's (2.x, v2) own `solveChallenge` with its WebCrypto PBKDF2 `deriveKey`, in
//   the page's main thread as ALTCHA solves it per worker, on challenges shaped like the edge's
//   for `bits` (`difficulty::v2_split`: 1,024 counters of 2^(bits−10) iterations up to 2^12),
//   solving counter `--counters − 1` so exactly `--counters` keys are derived.
// - Farm: Node's native PBKDF2 (OpenSSL, one core, `crypto.pbkdf2Sync`) on the same passwords:
//   what a native solver pays per counter.
//
//   node bench/scalpers/pow-rate-v2.mjs                     (bits 10 16 20 22, 256 counters each)
//   node bench/scalpers/pow-rate-v2.mjs --bits 16,22 --counters 512
//
// Prints one JSON line: per bits, iterations per second in Chromium and natively, their ratio,
// and the implied honest solve time (half of 2^bits iterations, on average). Chromium is Debian's
// (/usr/bin/chromium, or $CHROMIUM) with a fresh --user-data-dir.
import { createServer } from "node:http";
import { pbkdf2Sync } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir, loadavg, cpus } from "node:os";
import { join, resolve, dirname, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import puppeteer from "puppeteer-core";
import { createChallenge } from "altcha-lib";
import { deriveKey } from "altcha-lib/algorithms/pbkdf2";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const LIB = join(ROOT, "node_modules/altcha-lib/dist/esm/v2");

const { values: opt } = parseArgs({
  options: {
    bits: { type: "string", default: "10,16,20,22" },
    counters: { type: "string", default: "256" },
    help: { type: "boolean", default: false },
  },
});
if (opt.help) {
  console.log("node bench/scalpers/pow-rate-v2.mjs [--bits 10,16,20,22] [--counters N]");
  process.exit(0);
}
const counters = Number(opt.counters);
const allBits = opt.bits.split(",").map(Number);
/** The edge's split (edge/src/proof/difficulty.rs `v2_split`): iterations per counter. */
const cost = (bits) => 2 ** Math.min(12, Math.max(0, bits - 10));

const PAGE = `<!doctype html><meta charset="utf-8"><title>pow rate v2</title>
<script type="module">
import { solveChallenge } from "/altcha/index.js";
import { deriveKey } from "/altcha/algorithms/web/pbkdf2.js";
window.solve = async (challenge) => {
  const t0 = performance.now();
  const s = await solveChallenge({ challenge, deriveKey, timeout: 0 });
  return { counter: s && s.counter, ms: performance.now() - t0 };
};
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

const profile = mkdtempSync(join(tmpdir(), "pow-rate-v2-chromium-"));
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run", `--user-data-dir=${profile}`],
});
try {
  const page = await browser.newPage();
  await page.goto(url);
  await page.waitForFunction("window.ready === true");
  const results = [];
  for (const bits of allBits) {
    const c = await createChallenge({
      algorithm: "PBKDF2/SHA-256",
      cost: cost(bits),
      counter: counters - 1,
      deriveKey,
      data: { kid: "p1", purpose: "purchase", sku: "SCALP-ON-0a1b2c3d", user: "honest-0" },
      expiresAt: Math.floor(Date.now() / 1000) + 600,
      hmacSignatureSecret: "pow-rate",
      hmacKeySignatureSecret: "pow-rate",
    });
    const got = await page.evaluate((ch) => window.solve(ch), c);
    if (got.counter !== counters - 1) throw new Error(`${bits} bits: solved ${got.counter}, want ${counters - 1}`);
    const iterations = counters * cost(bits);
    const browserRate = (iterations * 1000) / got.ms;
    // The farm: the same derivations natively, one core.
    const nonce = Buffer.from(c.parameters.nonce, "hex");
    const salt = Buffer.from(c.parameters.salt, "hex");
    const password = Buffer.alloc(nonce.length + 4);
    nonce.copy(password);
    const t0 = process.hrtime.bigint();
    for (let n = 0; n < counters; n += 1) {
      password.writeUInt32BE(n, nonce.length);
      pbkdf2Sync(password, salt, cost(bits), 32, "sha256");
    }
    const nativeMs = Number(process.hrtime.bigint() - t0) / 1e6;
    const nativeRate = (iterations * 1000) / nativeMs;
    const average = 2 ** (bits - 1);
    results.push({
      bits,
      cost: cost(bits),
      counters_derived: counters,
      chromium_iterations_per_sec: Math.round(browserRate),
      native_iterations_per_sec: Math.round(nativeRate),
      native_over_chromium: Number((nativeRate / browserRate).toFixed(2)),
      chromium_average_solve_ms: Math.round((average * 1000) / browserRate),
      native_average_solve_ms: Number(((average * 1000) / nativeRate).toFixed(2)),
    });
  }
  console.log(
    JSON.stringify({
      solver: "altcha-lib 2.x solveChallenge + web PBKDF2 deriveKey (main thread) vs node:crypto pbkdf2Sync (one core)",
      chromium: await browser.version(),
      loadavg: loadavg().map((l) => l.toFixed(2)),
      cpu: cpus()[0]?.model,
      results,
    }),
  );
} finally {
  await browser.close();
  server.close();
  rmSync(profile, { recursive: true, force: true });
}
