// The sale page against the bot defences (issue 28), in a real browser: Debian's headless
// Chromium (puppeteer-core) against the BUILT worker in workerd in front of the REAL origin
// (edge/e2e/harness.mjs), as sale_page.test.mjs. A sale with `proof_of_work`: the page solves
// the edge's ALTCHA challenges in a Web Worker (/sale-worker.js, altcha-lib's own solver) with
// the progress shown, then buys (or joins the line); 428 and 403 get a fresh challenge; a sale
// with `network_limits`: the shop's bound for the shopper's network is said in words, with the
// time to try again. Each test asserts what the shopper sees (the words, the progress bar, the
// button, the bought state) and what was really sent and stored (the proofs, the orders).
//
// Every solve is recorded (the page's "flashgate-proof" User Timing measures: bits, maxnumber,
// number found, hashes, ms, and the longest gap of a 10 ms heartbeat on the page's main thread
// meanwhile) in $SALE_PAGE_ARTIFACTS/pow-solves.json, with a one-line summary; two measurements
// (not assertions) give the solver's hash rate at 2^16 candidates, worst case.
//
//   node --test edge/e2e/browser/        (after scripts/edge-build.sh and cargo build -p origin)
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { loadavg } from "node:os";
import { join } from "node:path";
import { createChallenge, solveChallenge } from "altcha-lib/v1";

import { ARTIFACTS, launchChromium } from "./chromium.mjs";
import { POW_KID, POW_SECRET, Stack, requestFrom, tokenFor, unique } from "../harness.mjs";

const EDGE_VARS = { IDEMPOTENCY_IN_FLIGHT_TIMEOUT_SECS: "1" };
/** Low difficulty for the flows (2^4..2^10 candidates): quick even on a loaded 2-core machine. */
const POW = { min_bits: 4, max_bits: 10 };
/** The longest pause of the page's main thread allowed during a solve (a 10 ms heartbeat). */
const MAX_GAP_MS = 200;

let stack;
let browser;
/** Every solve of the run, for pow-solves.json. */
const solves = [];
/** The measurements (hash rates) of the run. */
const rates = [];

before(async () => {
  stack = new Stack();
  await stack.start(EDGE_VARS);
  browser = await launchChromium();
});

after(async () => {
  const record = {
    chromium: await browser?.version(),
    hardware_concurrency: rates.find((r) => r.hardware_concurrency)?.hardware_concurrency,
    load_average_1m: Number(loadavg()[0].toFixed(2)),
    solves,
    rates,
  };
  writeFileSync(join(ARTIFACTS, "pow-solves.json"), `${JSON.stringify(record, null, 2)}\n`);
  const ms = solves.map((s) => s.ms).sort((a, b) => a - b);
  const bits = solves.map((s) => s.bits);
  const parts = [`${solves.length} solves`];
  if (solves.length) {
    parts.push(`2^${Math.min(...bits)}..2^${Math.max(...bits)} candidates, median ${ms[Math.floor(ms.length / 2)].toFixed(0)} ms`);
    parts.push(`longest main-thread gap ${Math.max(...solves.map((s) => s.max_gap_ms)).toFixed(0)} ms`);
  }
  if (rates.length) parts.push(`hashes/s at 2^16, worst case: ${rates.map((r) => `${r.hashes_per_sec} (${r.what})`).join(", ")}`);
  console.log(`proof-of-work in headless ${record.chromium} (load ${record.load_average_1m}): ${parts.join("; ")} → ${join(ARTIFACTS, "pow-solves.json")}`);
  await browser?.close();
  await stack?.stop();
});

/** PUT a sale on the origin with any fields of the admin API, then warm it into the edge. */
async function putSale(sku, fields) {
  await stack.putSale(sku, fields);
  const w = await stack.warmup([sku]);
  assert.equal(w.status, 200, w.text);
  return sku;
}

/** The orders of `sku` in the origin's database and their distinct Idempotency-Keys. */
function orders(sku) {
  const out = execFileSync("psql", ["-h", "127.0.0.1", "-U", "postgres", "-d", stack.db, "-Atc", `SELECT count(*), count(DISTINCT idempotency_key) FROM orders WHERE sku = '${sku}'`], { encoding: "utf8" });
  const [n, keys] = out.trim().split("|").map(Number);
  return { n, keys };
}

/** A solved challenge of `sku` for `token`'s shopper, as Flashgate-Proof (solved here by altcha-lib). */
async function proofFor(sku, token) {
  const r = await stack.get(`/v1/challenge?sku=${sku}`, { authorization: `Bearer ${token}` });
  assert.equal(r.status, 200, r.text);
  const c = r.json;
  const solution = await solveChallenge(c.challenge, c.salt, c.algorithm, c.maxnumber).promise;
  return btoa(JSON.stringify({ algorithm: c.algorithm, challenge: c.challenge, number: solution.number, salt: c.salt, signature: c.signature }));
}

/** The JSON payload of a Flashgate-Proof header and its salt's parameters. */
function decodeProof(value) {
  const payload = JSON.parse(Buffer.from(value, "base64").toString());
  return { payload, params: Object.fromEntries(new URLSearchParams(payload.salt.split("?")[1])) };
}

/**
 * Runs in the page before its own script: a 10 ms heartbeat on the main thread, and a record of
 * what the shopper sees change (the result region, the progress block and its text, the line,
 * the button).
 */
function watchPage() {
  window.__beats = [];
  const beat = () => {
    window.__beats.push(performance.now());
    setTimeout(beat, 10);
  };
  beat();
  window.__seen = [];
  const look = () => {
    const get = (id) => document.getElementById(id);
    if (!get("result")) return;
    const now = {
      result: get("result").textContent,
      state: get("result").dataset.state || "",
      check: get("check").hidden ? "" : get("check-text").textContent,
      value: get("check").hidden ? null : get("check-bar").value,
      line: get("line").hidden ? "" : get("line").textContent,
      lineState: get("line").dataset.state || "",
      buy: get("buy").disabled ? "off" : "on",
    };
    const last = window.__seen.at(-1);
    if (!last || Object.keys(now).some((k) => now[k] !== last[k])) window.__seen.push({ t: performance.now(), ...now });
  };
  document.addEventListener("DOMContentLoaded", () => {
    look();
    new MutationObserver(look).observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
  });
}

/**
 * A fresh tab (own cookies and sessionStorage) on the sale page of `sku` as a new shopper (token
 * in the URL fragment), watched (watchPage). Records every API request and answer the page makes.
 */
async function open(sku, { user = unique("shopper") } = {}) {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  await page.setViewport({ width: 560, height: 560 });
  const requests = [];
  const answers = [];
  const violations = [];
  const foreign = [];
  page.on("request", (req) => {
    const url = new URL(req.url());
    if (url.origin !== stack.edgeUrl) foreign.push(req.url());
    if (url.pathname.startsWith("/v1/")) requests.push({ method: req.method(), path: url.pathname, headers: req.headers() });
  });
  page.on("response", (r) => {
    const url = new URL(r.url());
    if (url.pathname.startsWith("/v1/")) answers.push({ method: r.request().method(), path: url.pathname, status: r.status(), headers: r.headers() });
  });
  page.on("console", (msg) => {
    if (/Content.Security.Policy|Trusted.?(Type|Script)/i.test(msg.text())) violations.push(msg.text());
  });
  page.on("pageerror", (e) => violations.push(String(e)));
  await page.evaluateOnNewDocument(watchPage);
  const token = tokenFor(user);
  const response = await page.goto(`${stack.edgeUrl}/sale/${sku}#token=${token}`, { waitUntil: "load" });
  await page.waitForFunction(() => document.getElementById("name").textContent !== "Loading…");
  const sent = (method, path) => requests.filter((r) => r.method === method && r.path === path);
  const got = (method, path) => answers.filter((r) => r.method === method && r.path === path);
  return { page, context, user, token, requests, answers, sent, got, violations, foreign, response };
}

const text = (page, id) => page.$eval(`#${id}`, (e) => e.textContent);
const state = (page) => page.$eval("#result", (e) => e.dataset.state);
const buyEnabled = (page) => page.$eval("#buy", (b) => !b.disabled);
const seen = (page) => page.evaluate(() => window.__seen);

async function finalState(page, want, timeout = 30_000) {
  await page.waitForFunction((w) => document.getElementById("result").dataset.state === w, { timeout }, want).catch(async (e) => {
    throw new Error(`result never became ${want}: state=${await state(page)} text=${await text(page, "result")} wait=${await text(page, "wait")}\n${stack.logs()}\n${e}`);
  });
  return text(page, "result");
}

async function shot(page, name) {
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`) });
}

/**
 * The page's solves so far (its "flashgate-proof" measures), each with the longest gap of the
 * heartbeat across it; recorded for pow-solves.json under `label`.
 */
async function recordSolves(page, label) {
  const got = await page.evaluate(() =>
    performance.getEntriesByName("flashgate-proof").map((e) => {
      const end = e.startTime + e.duration;
      const beats = window.__beats;
      let gap = 0;
      for (let i = 1; i < beats.length; i += 1) {
        if (beats[i] >= e.startTime && beats[i - 1] <= end) gap = Math.max(gap, beats[i] - beats[i - 1]);
      }
      return { ...e.detail, ms: e.duration, max_gap_ms: gap };
    }),
  );
  const out = got.map((s) => ({
    test: label,
    purpose: s.purpose,
    bits: s.bits,
    maxnumber: s.maxnumber,
    number: s.number,
    hashes: s.hashes,
    ms: Number(s.ms.toFixed(1)),
    hashes_per_sec: Math.round(s.hashes / (s.ms / 1000)),
    max_gap_ms: Number(s.max_gap_ms.toFixed(1)),
  }));
  solves.push(...out);
  return out;
}

/** Asserts the page showed the check: the status words, the progress bar with its percentage, Buy off. */
function assertCheckShown(history, { purchase = true } = {}) {
  const checks = history.filter((s) => s.check !== "");
  assert.ok(checks.length > 0, `the progress was never shown: ${JSON.stringify(history)}`);
  for (const s of checks) {
    assert.match(s.check, /^Checking your browser… \d{1,3} %$/);
    assert.equal(s.value, Number(s.check.match(/(\d+) %/)[1]), "the bar shows the percentage");
    assert.equal(s.buy, "off", "Buy is off while solving");
  }
  if (purchase) assert.ok(checks.every((s) => s.state === "checking" && s.result === "Checking your browser…"), JSON.stringify(checks));
}

describe("the sale page with a proof of work", () => {
  test("the solver is a same-origin script under its own strict CSP; the page's CSP allows exactly it", async () => {
    const r = await fetch(`${stack.edgeUrl}/sale-worker.js`);
    assert.equal(r.status, 200);
    assert.match(r.headers.get("content-type"), /^text\/javascript/);
    assert.equal(r.headers.get("content-security-policy"), "default-src 'none'; require-trusted-types-for 'script'; trusted-types 'none'");
    assert.equal(r.headers.get("x-content-type-options"), "nosniff");
    assert.equal(r.headers.get("cache-control"), "public, max-age=60");
    assert.match(await r.text(), /^\/\/ GENERATED by scripts\/sale-worker-bundle\.sh .* altcha-lib 2\.8\.0 /);
    const sku = await putSale(unique("POWCSP"), { proof_of_work: POW });
    const { page, context, response } = await open(sku);
    const csp = response.headers()["content-security-policy"];
    assert.match(csp, /; worker-src 'self'; /);
    assert.match(csp, /; require-trusted-types-for 'script'; trusted-types flashgate-worker$/);
    // Only the solver's URL becomes a script URL; another same-origin script cannot be a worker.
    const refused = await page.evaluate(() => {
      try {
        new Worker("/sale/evil.js");
        return "created";
      } catch (e) {
        return e.name;
      }
    });
    assert.equal(refused, "TypeError", "a plain string is refused by Trusted Types");
    await context.close();
  });

  test("Buy: the progress is shown while a worker solves, the purchase carries the proof, bought; the page stays responsive", async () => {
    const sku = await putSale(unique("POW"), { stock: 10, proof_of_work: POW });
    const { page, context, user, sent, violations, foreign } = await open(sku);
    assert.equal(await buyEnabled(page), true);
    await page.click("#buy");
    assert.match(await finalState(page, "bought"), /^Bought! Order [0-9a-f-]{36}\.$/);
    await shot(page, "pow-bought");
    assertCheckShown(await seen(page));
    assert.equal(await page.$eval("#check", (e) => e.hidden), true, "the progress is gone once solved");
    assert.equal(sent("GET", "/v1/challenge").length, 1);
    const [purchase] = sent("POST", "/v1/purchases");
    assert.equal(sent("POST", "/v1/purchases").length, 1);
    const { payload, params } = decodeProof(purchase.headers["flashgate-proof"]);
    assert.deepEqual(Object.keys(payload).sort(), ["algorithm", "challenge", "number", "salt", "signature", "took"]);
    assert.deepEqual([params.sku, params.user, params.purpose], [sku, user, "purchase"]);
    const [solve] = await recordSolves(page, "buy");
    assert.equal(solve.number, payload.number);
    assert.ok(solve.maxnumber >= 2 ** POW.min_bits && solve.maxnumber <= 2 ** POW.max_bits, JSON.stringify(solve));
    assert.ok(solve.max_gap_ms <= MAX_GAP_MS, `the main thread paused ${solve.max_gap_ms} ms during the solve`);
    assert.deepEqual(orders(sku), { n: 1, keys: 1 });
    assert.deepEqual(violations, []);
    assert.deepEqual(foreign, []);
    await context.close();
  });

  test("428: the proof of work was switched on after the page loaded; the page solves and buys with the same key", async () => {
    const sku = await putSale(unique("POW428"), { stock: 10 });
    const { page, context, sent, got } = await open(sku);
    await putSale(sku, { stock: 10, proof_of_work: POW });
    await page.click("#buy");
    assert.match(await finalState(page, "bought"), /^Bought! Order /);
    const purchases = sent("POST", "/v1/purchases");
    assert.deepEqual(got("POST", "/v1/purchases").map((a) => a.status), [428, 201]);
    assert.equal(purchases[0].headers["flashgate-proof"], undefined, "the page did not know yet");
    assert.ok(purchases[1].headers["flashgate-proof"], "then it solved one");
    assert.equal(purchases[0].headers["idempotency-key"], purchases[1].headers["idempotency-key"]);
    assertCheckShown(await seen(page));
    await recordSolves(page, "428");
    assert.deepEqual(orders(sku), { n: 1, keys: 1 });
    await context.close();
  });

  test("403: a rejected proof (already spent) gets a fresh challenge, and the page buys", async () => {
    const sku = await putSale(unique("POW403"), { stock: 10, proof_of_work: POW });
    const user = unique("shopper");
    const token = tokenFor(user);
    // A proof of this shopper for this SKU, spent by a purchase of their own (another key).
    const spent = await proofFor(sku, token);
    const first = await stack.purchase({ token, key: unique("k"), body: { sku, qty: 1 }, headers: { "flashgate-proof": spent } });
    assert.equal(first.status, 201, first.text);
    const { page, context, sent, got } = await open(sku, { user });
    // The page's first proof is swapped for the spent one on its way to the edge.
    await page.setRequestInterception(true);
    let swapped = 0;
    page.on("request", (req) => {
      if (req.url().endsWith("/v1/purchases") && swapped === 0) {
        swapped += 1;
        return req.continue({ headers: { ...req.headers(), "flashgate-proof": spent } });
      }
      return req.continue();
    });
    await page.click("#buy");
    assert.match(await finalState(page, "bought"), /^Bought! Order /);
    assert.deepEqual(got("POST", "/v1/purchases").map((a) => a.status), [403, 201]);
    assert.equal(sent("GET", "/v1/challenge").length, 2, "a fresh challenge after the 403");
    const keys = new Set(sent("POST", "/v1/purchases").map((r) => r.headers["idempotency-key"]));
    assert.equal(keys.size, 1);
    assert.equal((await seen(page)).filter((s, i, all) => s.state === "checking" && all[i - 1]?.state !== "checking").length, 2, "checked twice");
    await recordSolves(page, "403");
    assert.deepEqual(orders(sku), { n: 2, keys: 2 }, "the shopper's own first order and the page's");
    await context.close();
  });

  test("403 again and again: after two fresh challenges the page says so; the next click buys with the same key", async () => {
    const sku = await putSale(unique("POW403X"), { stock: 10, proof_of_work: POW });
    const other = await putSale(unique("POW403Y"), { stock: 10, proof_of_work: POW });
    const user = unique("shopper");
    // Another SKU's proof of the same shopper: refused for this SKU, every time.
    const wrong = await proofFor(other, tokenFor(user));
    const { page, context, sent, got } = await open(sku, { user });
    await page.setRequestInterception(true);
    let swap = true;
    page.on("request", (req) => {
      if (swap && req.url().endsWith("/v1/purchases")) return req.continue({ headers: { ...req.headers(), "flashgate-proof": wrong } });
      return req.continue();
    });
    await page.click("#buy");
    assert.equal(await finalState(page, "proof_rejected"), "The check of your browser did not succeed. Please try again.");
    await shot(page, "pow-rejected");
    assert.deepEqual(got("POST", "/v1/purchases").map((a) => a.status), [403, 403, 403], "the first and two fresh ones");
    assert.equal(sent("GET", "/v1/challenge").length, 3);
    assert.equal(await buyEnabled(page), true, "the shopper may try again");
    assert.equal(await page.$eval("#result", (e) => e.getAttribute("role")), "status");
    swap = false;
    await page.click("#buy");
    assert.match(await finalState(page, "bought"), /^Bought! Order /);
    const keys = new Set(sent("POST", "/v1/purchases").map((r) => r.headers["idempotency-key"]));
    assert.equal(keys.size, 1, "the kept intent: one key for all four attempts");
    await recordSolves(page, "403-bounded");
    assert.deepEqual(orders(sku), { n: 1, keys: 1 });
    await context.close();
  });

  test("a waiting room with a proof of work: opening the page solves a join challenge, joins, is admitted and buys with the pass", async () => {
    const sku = await putSale(unique("POWROOM"), { stock: 10, proof_of_work: POW, waiting_room: { admit_per_minute: 600, pass_secs: 120 } });
    const { page, context, user, sent, got } = await open(sku);
    await page.waitForFunction(() => document.getElementById("line").dataset.state === "admitted", { timeout: 30_000 });
    const history = await seen(page);
    assert.ok(history.some((s) => s.lineState === "checking" && s.line === "Checking your browser before you join the line…"), JSON.stringify(history));
    assertCheckShown(history, { purchase: false });
    const [joinReq] = sent("POST", `/v1/queue/${sku}`);
    assert.equal(got("POST", `/v1/queue/${sku}`)[0].status, 200);
    const { params } = decodeProof(joinReq.headers["flashgate-proof"]);
    assert.deepEqual([params.sku, params.user, params.purpose], [sku, user, "join"]);
    await page.click("#buy");
    assert.match(await finalState(page, "bought"), /^Bought! Order /);
    const [purchase] = sent("POST", "/v1/purchases");
    assert.ok(purchase.headers["flashgate-pass"], "the pass buys");
    assert.equal(purchase.headers["flashgate-proof"], undefined, "the join paid: no proof with the purchase");
    const [solve] = await recordSolves(page, "join");
    assert.equal(solve.purpose, "join");
    assert.deepEqual(orders(sku), { n: 1, keys: 1 });
    await context.close();
  });

  test("a waiting room: a rejected join proof (another SKU's) gets a fresh challenge, and the page joins", async () => {
    const room = { admit_per_minute: 600, pass_secs: 120 };
    const sku = await putSale(unique("POWJ403"), { stock: 10, proof_of_work: POW, waiting_room: room });
    const other = await putSale(unique("POWJ403B"), { stock: 10, proof_of_work: POW, waiting_room: room });
    const user = unique("shopper");
    const wrong = await proofFor(other, tokenFor(user));
    const context = await browser.createBrowserContext();
    const page = await context.newPage();
    await page.evaluateOnNewDocument(watchPage);
    await page.setRequestInterception(true);
    const joins = [];
    let swapped = 0;
    page.on("request", (req) => {
      if (req.method() === "POST" && req.url().endsWith(`/v1/queue/${sku}`) && swapped++ === 0) return req.continue({ headers: { ...req.headers(), "flashgate-proof": wrong } });
      return req.continue();
    });
    page.on("response", (r) => r.request().method() === "POST" && r.url().endsWith(`/v1/queue/${sku}`) && joins.push(r.status()));
    await page.goto(`${stack.edgeUrl}/sale/${sku}#token=${tokenFor(user)}`, { waitUntil: "load" });
    await page.waitForFunction(() => ["waiting", "admitted"].includes(document.getElementById("line").dataset.state), { timeout: 30_000 });
    assert.deepEqual(joins, [403, 200]);
    assert.match(await text(page, "line"), /^(You are number \d+ in line\.|It is your turn)/);
    await recordSolves(page, "join-403");
    await context.close();
  });
});

describe("the sale page with a bound per network", () => {
  test("429 network_limit: the shop's limit for the shopper's network, in words, with when to try again", async () => {
    const sku = await putSale(unique("NETPAGE"), { stock: 10, network_limits: { units: 1 } });
    // Another shopper of the same /24 (the browser connects from 127.0.0.1) takes the network's unit.
    const other = await requestFrom("127.0.0.2", `${stack.edgeUrl}/v1/purchases`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${tokenFor(unique("neighbour"))}`, "idempotency-key": unique("k") },
      body: { sku, qty: 1 },
    });
    assert.equal(other.status, 201, other.text);
    const { page, context, sent, got } = await open(sku);
    await page.click("#buy");
    const words = await finalState(page, "network_limit");
    const m = words.match(/^The shop's limit for purchases from your network has been reached\. Try again after (.+) \(in about (\d+) minutes\)\.$/);
    assert.ok(m, words);
    await shot(page, "network-limit");
    // The time shown is Retry-After from the answer, in the browser's local time.
    const refusal = got("POST", "/v1/purchases").at(-1);
    assert.equal(refusal.status, 429);
    const retry = Number(refusal.headers["retry-after"]);
    assert.ok(retry > 3500 && retry <= 3600, `Retry-After ${retry}`);
    assert.equal(Number(m[2]), Math.round(retry / 60));
    const local = await page.evaluate((ms) => new Date(ms).toLocaleTimeString(), Date.now() + retry * 1000);
    const diff = Math.abs(Date.parse(`1970-01-01 ${m[1]}`) - Date.parse(`1970-01-01 ${local}`));
    assert.ok(diff <= 3000, `${m[1]} vs ${local}`);
    assert.equal(await page.$eval("#result", (e) => e.getAttribute("role")), "status");
    assert.equal(await buyEnabled(page), false, "no point in trying before then");
    // The intent (its key) is kept; a reload says the same and sends nothing before the time.
    const key = sent("POST", "/v1/purchases")[0].headers["idempotency-key"];
    const before = sent("POST", "/v1/purchases").length;
    await page.reload({ waitUntil: "load" });
    const again = (await finalState(page, "network_limit")).match(/^The shop's limit for purchases from your network has been reached\. Try again after (.+) \(in about \d+ minutes\)\.$/);
    assert.ok(again, await text(page, "result"));
    // The same time (this load's estimate of the edge's clock may differ by up to a second).
    assert.ok(Math.abs(Date.parse(`1970-01-01 ${again[1]}`) - Date.parse(`1970-01-01 ${m[1]}`)) <= 1000, `${again[1]} vs ${m[1]}`);
    assert.equal(sent("POST", "/v1/purchases").length, before, "nothing sent on the reload");
    assert.equal(await page.evaluate((k) => JSON.parse(sessionStorage.getItem(k)).key, `flashgate.intent.${sku}`), key);
    assert.equal(await buyEnabled(page), false);
    assert.deepEqual(orders(sku), { n: 1, keys: 1 }, "the neighbour's only");
    await context.close();
  });
});

describe("measurements: the solver's hash rate in headless Chromium (2^16 candidates, worst case)", () => {
  const BITS = 16;

  test("the page: a signed 2^16 challenge whose number is maxnumber (65,537 hashes), solved, bought; responsive", async () => {
    const sku = await putSale(unique("POWRATE"), { stock: 10, proof_of_work: { min_bits: BITS, max_bits: BITS } });
    const user = unique("shopper");
    const { page, context } = await open(sku, { user });
    // The challenge the edge would give, with the worst number: made by altcha-lib with the
    // edge's secret and the edge's parameters, so the edge accepts its solution.
    await page.setRequestInterception(true);
    page.on("request", async (req) => {
      if (!req.url().includes("/v1/challenge?")) return req.continue();
      const c = await createChallenge({
        hmacKey: POW_SECRET,
        maxnumber: 2 ** BITS,
        number: 2 ** BITS,
        params: { kid: POW_KID, purpose: "purchase", sku, user },
        expires: new Date(Date.now() + 120_000),
      });
      return req.respond({ status: 200, contentType: "application/json", headers: { "cache-control": "no-store" }, body: JSON.stringify(c) });
    });
    await page.click("#buy");
    // While it solves: a progress bar in the accessibility tree, named by its words.
    await page.waitForFunction(() => !document.getElementById("check").hidden, { timeout: 30_000 });
    const tree = await page.accessibility.snapshot();
    const find = (n) => (n.role === "progressbar" ? n : (n.children ?? []).map(find).find(Boolean));
    const bar = find(tree);
    assert.ok(bar, JSON.stringify(tree));
    assert.match(bar.name, /^Checking your browser… \d{1,3} %$/);
    await shot(page, "pow-checking");
    assert.match(await finalState(page, "bought", 120_000), /^Bought! Order /);
    const history = await seen(page);
    assertCheckShown(history);
    const values = [...new Set(history.filter((s) => s.value !== null).map((s) => s.value))];
    assert.ok(values.length >= 10, `the progress moved: ${values}`);
    assert.deepEqual(values, [...values].sort((a, b) => a - b), "and only forward");
    const [solve] = await recordSolves(page, "rate-2^16-worst-case");
    assert.equal(solve.number, 2 ** BITS);
    assert.equal(solve.hashes, 2 ** BITS + 1);
    assert.ok(solve.max_gap_ms <= MAX_GAP_MS, `the main thread paused ${solve.max_gap_ms} ms during a ${solve.ms} ms solve`);
    rates.push({ what: "page", bits: BITS, hashes: solve.hashes, ms: solve.ms, hashes_per_sec: solve.hashes_per_sec, max_gap_ms: solve.max_gap_ms });
    await context.close();
  });

  test("the bundle alone: one worker over the whole range vs navigator.hardwareConcurrency workers over slices", async () => {
    // The edge's /sale-worker.js served by a plain page of another origin (no CSP), to compare
    // the two ways altcha-lib solves: one worker in chunks (what the page does) and
    // solveChallengeWorkers' way, a worker per core, each over its slice.
    const script = await (await fetch(`${stack.edgeUrl}/sale-worker.js`)).text();
    const server = createServer((req, res) => {
      if (req.url === "/w.js") return res.writeHead(200, { "content-type": "text/javascript" }).end(script);
      return res.writeHead(200, { "content-type": "text/html" }).end("<!doctype html><title>solver</title>");
    });
    await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
    const context = await browser.createBrowserContext();
    try {
      const page = await context.newPage();
      await page.goto(`http://127.0.0.1:${server.address().port}/`, { waitUntil: "load" });
      const cores = await page.evaluate(() => navigator.hardwareConcurrency);
      const c = await createChallenge({ hmacKey: "measurement", maxnumber: 2 ** BITS, number: 2 ** BITS });
      const run = (workers) =>
        page.evaluate(
          (c, workers) =>
            new Promise((ok) => {
              const total = c.maxnumber + 1;
              const step = Math.ceil(total / workers);
              const tried = new Array(workers).fill(0);
              const all = [];
              const started = performance.now();
              for (let i = 0; i < workers; i += 1) {
                const w = new Worker("/w.js");
                all.push(w);
                w.onmessage = (e) => {
                  tried[i] = e.data.tried;
                  if (e.data.done && e.data.number !== null) {
                    const ms = performance.now() - started;
                    all.forEach((x) => x.terminate());
                    ok({ number: e.data.number, hashes: tried.reduce((a, b) => a + b, 0), ms });
                  }
                };
                const start = i * step;
                w.postMessage({ algorithm: c.algorithm, challenge: c.challenge, salt: c.salt, start, end: Math.min(c.maxnumber, start + step - 1), chunk: 1024 });
              }
            }),
          c,
          workers,
        );
      for (const workers of [1, cores, 1, cores]) {
        const r = await run(workers);
        assert.equal(r.number, 2 ** BITS);
        rates.push({ what: `${workers} worker${workers > 1 ? "s" : ""}`, hardware_concurrency: cores, bits: BITS, hashes: r.hashes, ms: Number(r.ms.toFixed(1)), hashes_per_sec: Math.round(r.hashes / (r.ms / 1000)) });
      }
    } finally {
      await context.close();
      server.close();
    }
  });
});
