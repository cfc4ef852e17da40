// The sale page in a real browser: Debian's headless Chromium (puppeteer-core, which downloads no
// browser) against the BUILT worker in workerd in front of the REAL origin (edge/e2e/harness.mjs).
// Each test asserts what the shopper sees (the words, the button) and what really happened
// (orders in Postgres, the Idempotency-Keys the page sent). Each final state's screenshot is
// written to $SALE_PAGE_ARTIFACTS (default: a flashgate-sale-page dir under the OS temp dir).
//
//   node --test edge/e2e/browser/        (after scripts/edge-build.sh and cargo build -p origin)
//   (edge/e2e/browser/chromium.mjs: which Chromium, where the screenshots go)
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { execFileSync, spawn } from "node:child_process";
import { createServer } from "node:http";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import { ARTIFACTS, launchChromium } from "./chromium.mjs";
import { Stack, tokenFor, unique } from "../harness.mjs";

// A short in-flight timeout (floored by the edge at ORIGIN_TIMEOUT_MS + 1 s = 4 s): a reload
// abandons its request, whose key may stay in flight at the edge until then.
const EDGE_VARS = { IDEMPOTENCY_IN_FLIGHT_TIMEOUT_SECS: "1" };

let stack;
let browser;

before(async () => {
  stack = new Stack();
  await stack.start(EDGE_VARS);
  browser = await launchChromium();
  console.log(`sale page screenshots: ${ARTIFACTS}`);
});

after(async () => {
  await browser?.close();
  await stack?.stop();
});

/** PUT a sale on the origin with any fields of the admin API (e.g. starts_at, hold_secs). */
const putSale = (sku, fields) => stack.putSale(sku, fields);

function sql(query) {
  return execFileSync("psql", ["-h", "127.0.0.1", "-U", "postgres", "-d", stack.db, "-Atc", query], { encoding: "utf8" }).trim();
}

/** The orders of `sku` in the origin's database and their distinct Idempotency-Keys. */
function orders(sku) {
  const [n, keys] = sql(`SELECT count(*), count(DISTINCT idempotency_key) FROM orders WHERE sku = '${sku}'`).split("|").map(Number);
  return { n, keys };
}

/**
 * Slows the origin for real: holds `sku`'s row lock in Postgres (a purchase of it waits on it)
 * until `release()`. Resolves once the lock is held.
 */
async function holdSkuRow(sku) {
  const locker = spawn("psql", ["-h", "127.0.0.1", "-U", "postgres", "-d", stack.db, "-v", "ON_ERROR_STOP=1"], { stdio: ["pipe", "pipe", "inherit"] });
  const locked = new Promise((ok) => locker.stdout.on("data", (d) => String(d).includes(sku) && ok()));
  locker.stdin.write(`BEGIN; SELECT sku FROM skus WHERE sku = '${sku}' FOR UPDATE;\n`);
  await locked;
  return { release: () => locker.stdin.end("COMMIT;\n") };
}

/** Waits until a purchase reached the origin and waits there on a held row lock. */
async function originWaitsOnTheRow() {
  const deadline = Date.now() + 10_000;
  while (sql(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) === "0") {
    assert.ok(Date.now() < deadline, "the origin's purchase never waited on the row lock");
    await sleep(50);
  }
}

/**
 * A fresh tab (own cookies and sessionStorage) on the sale page of `sku` as a new shopper
 * (token in the URL fragment unless `cookie`: then in the HttpOnly flashgate_session cookie).
 * Records the Idempotency-Key and answer of every purchase the page sends.
 */
async function open(sku, { user = unique("shopper"), cookie = false, beforeLoad } = {}) {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  await page.setViewport({ width: 560, height: 520 });
  const purchases = [];
  const violations = [];
  const foreign = [];
  page.on("request", (req) => {
    if (!req.url().startsWith(stack.edgeUrl)) foreign.push(req.url());
    if (req.url().endsWith("/v1/purchases")) purchases.push({ key: req.headers()["idempotency-key"], headers: req.headers() });
  });
  page.on("console", (msg) => {
    if (/Content.Security.Policy|Trusted Type/i.test(msg.text())) violations.push(msg.text());
  });
  const token = tokenFor(user);
  if (cookie) {
    await page.setCookie({ name: "flashgate_session", value: token, url: stack.edgeUrl, httpOnly: true, sameSite: "Strict" });
  }
  if (beforeLoad) await beforeLoad(page);
  const response = await page.goto(`${stack.edgeUrl}/sale/${sku}${cookie ? "" : `#token=${token}`}`, { waitUntil: "load" });
  await page.waitForFunction(() => document.getElementById("name").textContent !== "Loading…");
  return { page, context, user, token, purchases, violations, foreign, response };
}

const text = (page, id) => page.$eval(`#${id}`, (e) => e.textContent);
const state = (page) => page.$eval("#result", (e) => e.dataset.state);
const buyEnabled = (page) => page.$eval("#buy", (b) => !b.disabled);

async function finalState(page, want, timeout = 20_000) {
  await page.waitForFunction((w) => document.getElementById("result").dataset.state === w, { timeout }, want).catch(async (e) => {
    throw new Error(`result never became ${want}: state=${await state(page)} text=${await text(page, "result")} wait=${await text(page, "wait")}\n${stack.logs()}\n${e}`);
  });
  return text(page, "result");
}

async function shot(page, name) {
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`) });
}

describe("the sale page in headless Chromium", () => {
  test("is served by the edge under a strict CSP, shows the SKU and loads nothing from elsewhere", async () => {
    const sku = await putSale(unique("PAGE"), { name: "Demo sneaker", price_cents: 9900, stock: 7, max_per_user: 2 });
    const { page, context, violations, foreign, response } = await open(sku);
    const h = response.headers();
    assert.match(h["content-type"], /^text\/html/);
    assert.match(h["content-security-policy"], /^default-src 'none'; script-src 'sha256-[^']+'; style-src 'sha256-[^']+'; connect-src 'self';/);
    assert.equal(h["x-content-type-options"], "nosniff");
    assert.equal(await text(page, "name"), "Demo sneaker");
    assert.equal(await text(page, "price"), "99.00");
    assert.equal(await text(page, "stock"), "7");
    assert.equal(await text(page, "cap"), "2");
    assert.equal(await text(page, "countdown"), "On sale now.");
    assert.equal(await buyEnabled(page), true);
    // The style applied (the hash matched): the button is not the browser's default grey.
    const bg = await page.$eval("#buy", (b) => getComputedStyle(b).backgroundColor);
    assert.equal(bg, "rgb(10, 88, 202)");
    // The token left the address bar; the live region is there for screen readers.
    assert.equal(new URL(page.url()).hash, "");
    assert.equal(await page.$eval("#result", (e) => e.getAttribute("aria-live")), "polite");
    assert.deepEqual(violations, []);
    assert.deepEqual(foreign, []);
    await context.close();
  });

  test("buy: one click is one order, shown as bought (keyboard works too)", async () => {
    const sku = await putSale(unique("BUY"), { stock: 10 });
    const { page, context, purchases } = await open(sku);
    await page.focus("#buy");
    await page.keyboard.press("Enter");
    const words = await finalState(page, "bought");
    assert.match(words, /^Bought! Order [0-9a-f-]{36}\.$/);
    await shot(page, "bought");
    assert.deepEqual(orders(sku), { n: 1, keys: 1 });
    assert.equal(purchases.length, 1);
    assert.equal(await page.evaluate(() => sessionStorage.length && Object.keys(sessionStorage).filter((k) => k.startsWith("flashgate.intent")).length), 0, "the intent is dropped once final");
    await page.waitForFunction(() => document.getElementById("stock").textContent === "9");
    await context.close();
  });

  test("a double click buys once", async () => {
    const sku = await putSale(unique("DBL"), { stock: 10 });
    const { page, context, purchases } = await open(sku);
    // The purchase stays in flight until every click is in (without the held row a fast
    // purchase could finish between two clicks, and a click after "Bought!" rightly buys again).
    const row = await holdSkuRow(sku);
    try {
      await page.click("#buy", { count: 2, delay: 5 });
      // And two clicks in the same task, before any re-render could disable the button.
      await page.$eval("#buy", (b) => {
        b.click();
        b.click();
      });
      await originWaitsOnTheRow();
      await page.click("#buy", { count: 2, delay: 5 });
      assert.equal(await state(page), "pending");
    } finally {
      row.release();
    }
    await finalState(page, "bought");
    await sleep(500);
    assert.deepEqual(orders(sku), { n: 1, keys: 1 });
    assert.equal(new Set(purchases.map((p) => p.key)).size, 1, JSON.stringify(purchases.map((p) => p.key)));
    await context.close();
  });

  test("a reload while the origin is slow resumes the same intent: same key, one order", async () => {
    const sku = await putSale(unique("SLOW"), { stock: 10 });
    const { page, context, purchases } = await open(sku);
    const row = await holdSkuRow(sku);
    try {
      await page.click("#buy");
      const key = await page.evaluate((k) => JSON.parse(sessionStorage.getItem(k)).key, `flashgate.intent.${sku}`);
      await originWaitsOnTheRow();
      assert.equal(await state(page), "pending");
      assert.equal(await buyEnabled(page), false);
      await page.reload({ waitUntil: "load" });
      await page.waitForFunction(() => document.getElementById("result").dataset.state !== "");
      assert.equal(await page.evaluate((k) => JSON.parse(sessionStorage.getItem(k)).key, `flashgate.intent.${sku}`), key);
      await sleep(1000);
    } finally {
      row.release();
    }
    const words = await finalState(page, "bought", 30_000);
    assert.match(words, /^Bought!/);
    assert.ok(purchases.length >= 2, "the reloaded page sent the intent again");
    assert.deepEqual([...new Set(purchases.map((p) => p.key))].length, 1, JSON.stringify(purchases.map((p) => p.key)));
    assert.deepEqual(orders(sku), { n: 1, keys: 1 });
    await context.close();
  });

  test("sold out: another shopper took the last unit after the page loaded", async () => {
    const sku = await putSale(unique("SOLD"), { stock: 1 });
    const { page, context } = await open(sku);
    assert.equal(await text(page, "stock"), "1");
    const other = await stack.purchase({ token: tokenFor(unique("other")), key: unique("k"), body: { sku, qty: 1 } });
    assert.equal(other.status, 201, other.text);
    await page.click("#buy");
    assert.equal(await finalState(page, "sold_out"), "Sold out: no units are left.");
    await shot(page, "sold-out");
    assert.equal(await buyEnabled(page), false);
    assert.equal(await text(page, "stock"), "0");
    assert.deepEqual(orders(sku), { n: 1, keys: 1 });
    await context.close();
  });

  test("limit reached: the shopper already bought the most allowed", async () => {
    const sku = await putSale(unique("CAP"), { stock: 10, max_per_user: 1 });
    const user = unique("shopper");
    const first = await stack.purchase({ token: tokenFor(user), key: unique("k"), body: { sku, qty: 1 } });
    assert.equal(first.status, 201, first.text);
    const { page, context } = await open(sku, { user });
    await page.click("#buy");
    assert.equal(await finalState(page, "purchase_limit"), "Limit reached: you already bought the most this sale allows per shopper (1).");
    await shot(page, "limit-reached");
    assert.equal(await buyEnabled(page), false);
    assert.deepEqual(orders(sku), { n: 1, keys: 1 });
    await context.close();
  });

  test("a hold is shown with its expiry", async () => {
    const sku = await putSale(unique("HOLD"), { stock: 10, hold_secs: 600 });
    const { page, context } = await open(sku);
    const answered = page.waitForResponse((r) => r.url().endsWith("/v1/purchases"));
    await page.click("#buy");
    const body = await (await answered).json();
    assert.equal(body.status, "held");
    const words = await finalState(page, "held");
    const local = await page.evaluate((iso) => new Date(iso).toLocaleTimeString(), body.expires_at);
    assert.match(words, /^Bought! Your unit is held until \d{1,2}:\d{2}:\d{2}( [AP]M)?: pay before then\. Order /);
    // The edge's clock and the browser's are the same machine's: at most a second apart.
    const shown = words.match(/held until (.*?): pay/)[1];
    const diff = Math.abs(Date.parse(`1970-01-01 ${shown}`) - Date.parse(`1970-01-01 ${local}`));
    assert.ok(diff <= 1000, `${shown} vs ${local}`);
    await shot(page, "held");
    await context.close();
  });

  test("the session cookie works from the page (which sends the CSRF header)", async () => {
    const sku = await putSale(unique("COOKIE"), { stock: 10 });
    const { page, context, purchases } = await open(sku, { cookie: true });
    await page.click("#buy");
    await finalState(page, "bought");
    assert.equal(purchases[0].headers.authorization, undefined, "no Bearer header: the cookie carried the session");
    assert.equal(purchases[0].headers["x-flashgate-csrf"], "1");
    assert.deepEqual(orders(sku), { n: 1, keys: 1 });
    await context.close();
  });
});

describe("cross-site requests in a real browser", () => {
  test("another site's page cannot buy with the shopper's session cookie", async () => {
    const sku = await putSale(unique("CSRF"), { stock: 10 });
    const token = tokenFor(unique("victim"));
    // The attacker's page: another origin on the same host (so even a SameSite=Strict cookie is
    // sent: same site, other port), which tries a simple POST (no preflight) and one with the
    // custom header (preflighted: the edge grants no CORS, so the browser never sends it).
    const attack = `<!doctype html><script>
      const send = (headers) => fetch(${JSON.stringify(stack.edgeUrl)} + "/v1/purchases", { method: "POST", mode: "no-cors", credentials: "include", headers, body: JSON.stringify({ sku: ${JSON.stringify(sku)}, qty: 1 }) }).then(() => "sent", (e) => "blocked: " + e);
      const cors = (headers) => fetch(${JSON.stringify(stack.edgeUrl)} + "/v1/purchases", { method: "POST", credentials: "include", headers, body: JSON.stringify({ sku: ${JSON.stringify(sku)}, qty: 1 }) }).then(() => "sent", (e) => "blocked: " + e);
      window.done = Promise.all([
        send({ "content-type": "text/plain", "idempotency-key": "csrf-1" }),
        cors({ "content-type": "application/json", "idempotency-key": "csrf-2", "x-flashgate-csrf": "1" }),
      ]);
    </script>`;
    const server = createServer((_, res) => res.writeHead(200, { "content-type": "text/html" }).end(attack));
    await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
    const context = await browser.createBrowserContext();
    try {
      const page = await context.newPage();
      await page.setCookie({ name: "flashgate_session", value: token, url: stack.edgeUrl, httpOnly: true, sameSite: "Strict" });
      const answers = [];
      page.on("response", (r) => r.url().endsWith("/v1/purchases") && answers.push(`${r.request().method()} ${r.status()}`));
      await page.goto(`http://127.0.0.1:${server.address().port}/`, { waitUntil: "load" });
      const [simple, preflighted] = await page.evaluate(() => window.done);
      assert.equal(simple, "sent", "the simple POST went out, with the cookie");
      assert.match(preflighted, /^blocked/, "the preflighted POST never went out");
      await sleep(300);
      assert.ok(answers.includes("POST 403"), `the edge refused the cookie without the header: ${answers}`);
      assert.deepEqual(orders(sku), { n: 0, keys: 0 });
    } finally {
      await context.close();
      server.close();
    }
  });
});

describe("the sale page against a tight rate limit", () => {
  let edge;
  before(async () => {
    // One purchase per 3 s per shopper.
    edge = await stack.startEdge({ ...EDGE_VARS, RATE_LIMIT_QUOTA: "1", RATE_LIMIT_WINDOW_SECS: "3" }, "tight");
  });
  after(async () => edge?.stop());

  test("429: a visible countdown, then the same key again, then bought", async () => {
    const sku = await putSale(unique("RATE"), { stock: 10 });
    const other = await putSale(unique("RATE-B"), { stock: 10 });
    const user = unique("shopper");
    const burn = await stack.purchase({ token: tokenFor(user), key: unique("k"), body: { sku: other, qty: 1 }, edgeUrl: edge.url });
    assert.equal(burn.status, 201, burn.text);
    const saved = stack.edgeUrl;
    stack.edgeUrl = edge.url;
    let opened;
    try {
      opened = await open(sku, { user });
    } finally {
      stack.edgeUrl = saved;
    }
    const { page, context, purchases } = opened;
    await page.click("#buy");
    await page.waitForFunction(() => /retrying in \d+ s\.$/.test(document.getElementById("wait").textContent), { timeout: 5_000 });
    assert.match(await text(page, "wait"), /^Too many attempts: retrying in [1-3] s\.$/);
    await shot(page, "rate-limited-countdown");
    await finalState(page, "bought");
    assert.equal(await text(page, "wait"), "");
    assert.ok(purchases.length >= 2);
    assert.equal(new Set(purchases.map((p) => p.key)).size, 1);
    assert.deepEqual(orders(sku), { n: 1, keys: 1 });
    await context.close();
  });
});

/** RFC 3339 UTC, whole seconds, `ms` from now (rounded up to the next second). */
const rfc3339In = (ms) => new Date(Math.ceil((Date.now() + ms) / 1000) * 1000).toISOString().replace(".000Z", "Z");

describe("the sale schedule on the page", () => {
  test("a countdown, then Buy enabled at the start (on the edge's clock, whatever the browser's says)", async () => {
    for (const skewMs of [0, 10 * 60_000]) {
      const startsAt = rfc3339In(8_000);
      const sku = await putSale(unique("START"), { stock: 10, starts_at: startsAt });
      // A browser whose clock runs `skewMs` ahead: only Date.now is moved (the page's clock).
      const beforeLoad = (page) =>
        page.evaluateOnNewDocument((skew) => {
          const real = Date.now;
          Date.now = () => real() + skew;
        }, skewMs);
      const { page, context } = await open(sku, { beforeLoad });
      assert.match(await text(page, "countdown"), /^Starts in 0:0[1-9]$/, `skew ${skewMs}`);
      assert.equal(await buyEnabled(page), false);
      if (skewMs === 0) await shot(page, "countdown");
      await page.waitForFunction(() => !document.getElementById("buy").disabled, { timeout: 15_000 });
      const openedAt = Date.now();
      const start = Date.parse(startsAt);
      // The page's estimate of the edge clock is within about half a second of it.
      assert.ok(openedAt >= start - 1_000, `opened ${start - openedAt} ms before the start (skew ${skewMs})`);
      assert.ok(openedAt <= start + 2_500, `opened ${openedAt - start} ms after the start (skew ${skewMs})`);
      assert.equal(await text(page, "countdown"), "On sale now.");
      await page.click("#buy");
      assert.match(await finalState(page, "bought"), /^Bought!/);
      assert.deepEqual(orders(sku), { n: 1, keys: 1 });
      await context.close();
    }
  });

  test("the start moved later after the page loaded: not started, in words", async () => {
    const sku = await putSale(unique("LATER"), { stock: 10 });
    const { page, context } = await open(sku);
    assert.equal(await buyEnabled(page), true);
    await putSale(sku, { stock: 10, starts_at: rfc3339In(2 * 3_600_000) });
    await page.click("#buy");
    assert.equal(await finalState(page, "not_started"), "The sale has not started yet. Buy opens at the start.");
    await page.waitForFunction(() => /^Starts in (1:59|2:00):[0-5]\d$/.test(document.getElementById("countdown").textContent));
    await shot(page, "not-started");
    assert.equal(await buyEnabled(page), false);
    assert.deepEqual(orders(sku), { n: 0, keys: 0 });
    await context.close();
  });

  test("ended and paused, in words", async () => {
    const ended = await putSale(unique("ENDED"), { stock: 10, ends_at: rfc3339In(-60_000) });
    const a = await open(ended);
    assert.equal(await text(a.page, "countdown"), "The sale has ended.");
    assert.equal(await buyEnabled(a.page), false);
    await a.context.close();

    // Ended or paused after the page loaded: the edge (or the origin) answers the click.
    const sku = await putSale(unique("END2"), { stock: 10 });
    const b = await open(sku);
    await putSale(sku, { stock: 10, ends_at: rfc3339In(-1_000) });
    await b.page.click("#buy");
    assert.equal(await finalState(b.page, "sale_ended"), "The sale has ended.");
    await shot(b.page, "ended");
    assert.equal(await buyEnabled(b.page), false);
    await b.context.close();

    const paused = await putSale(unique("PAUSE"), { stock: 10 });
    const c = await open(paused);
    await putSale(paused, { stock: 10, paused: true });
    await c.page.click("#buy");
    assert.equal(await finalState(c.page, "sale_paused"), "The sale is paused. Try again in a moment.");
    await shot(c.page, "paused");
    assert.equal(await text(c.page, "countdown"), "The sale is paused.");
    assert.equal(await buyEnabled(c.page), false);
    assert.deepEqual(orders(sku), { n: 0, keys: 0 });
    assert.deepEqual(orders(paused), { n: 0, keys: 0 });
    await c.context.close();
  });
});

/** `POST /v1/queue/{sku}` through the edge as `user` (a shopper joining the waiting room). */
async function joinLine(sku, user) {
  const r = await fetch(`${stack.edgeUrl}/v1/queue/${sku}`, { method: "POST", headers: { authorization: `Bearer ${tokenFor(user)}` } });
  const body = await r.text();
  assert.equal(r.status, 200, `join ${sku} as ${user}: ${body}`);
  return JSON.parse(body);
}

/** Tells the edge about a changed SKU now (instead of after its view's cache TTL). */
async function warm(sku) {
  const r = await stack.warmup([sku]);
  assert.equal(r.status, 200, r.text);
}

describe("the sale page with a waiting room", () => {
  test("joins when it opens, shows the place and the estimate, is admitted and buys once with the pass (kept across a reload)", async () => {
    // One admission per second from a start 2 s away; five shoppers join just after the start,
    // then the page: a few places behind them, so it waits a few seconds.
    const startsAt = rfc3339In(2_000);
    const sku = await putSale(unique("ROOM"), { stock: 10, starts_at: startsAt, waiting_room: { admit_per_minute: 60, pass_secs: 120 } });
    await warm(sku);
    await sleep(Date.parse(startsAt) + 1_000 - Date.now());
    for (let i = 0; i < 5; i += 1) await joinLine(sku, unique("ahead"));
    const lines = [];
    const { page, context, purchases } = await open(sku, {
      beforeLoad: (p) => p.on("response", async (r) => {
        if (r.url().includes("/v1/queue/") && r.status() === 200) lines.push(await r.json().catch(() => null));
      }),
    });
    await page.waitForFunction(() => document.getElementById("line").dataset.state === "waiting", { timeout: 10_000 });
    const words = await text(page, "line");
    const m = words.match(/^You are number (\d+) in line\. Estimated wait: less than a minute\.$/);
    assert.ok(m, words);
    assert.ok(lines.some((l) => l && l.position === Number(m[1]) && l.admitted === false), `${words} / ${JSON.stringify(lines)}`);
    assert.equal(await buyEnabled(page), false, "no Buy before the shopper's turn");
    await shot(page, "in-line");

    await page.waitForFunction(() => document.getElementById("line").dataset.state === "admitted", { timeout: 20_000 });
    assert.equal(await state(page), "admitted");
    assert.equal(await text(page, "result"), "It is your turn: you can buy now.");
    assert.match(await text(page, "line"), /^It is your turn: buy before \d{1,2}:\d{2}:\d{2}( [AP]M)?\.$/);
    assert.ok(lines.some((l) => l?.admitted && typeof l.pass === "string"), JSON.stringify(lines));
    // A reload keeps the pass (sessionStorage): Buy is on again without waiting in line.
    await page.reload({ waitUntil: "load" });
    await page.waitForFunction(() => !document.getElementById("buy").disabled, { timeout: 5_000 });
    await page.click("#buy");
    assert.match(await finalState(page, "bought"), /^Bought! Order /);
    assert.equal(purchases.length, 1);
    const passes = lines.filter((l) => l?.admitted).map((l) => l.pass);
    assert.ok(passes.includes(purchases[0].headers["flashgate-pass"]), "the purchase carried a pass the edge gave");
    assert.deepEqual(orders(sku), { n: 1, keys: 1 });
    await context.close();
  });

  test("in line when the last unit sells: the page says sold out at once and offers nothing; a restock lets it in, in order, and it buys", async () => {
    // Issue 36. One unit, overbook 1.0: the first shopper's pass is the only one; the page waits.
    const sku = await putSale(unique("SOLDOUT"), { stock: 1, waiting_room: { admit_per_minute: 6000, pass_secs: 60, overbook: 1 } });
    await warm(sku);
    const first = unique("first");
    let ahead = await joinLine(sku, first);
    const { page, context, purchases } = await open(sku);
    await page.waitForFunction(() => document.getElementById("line").dataset.state === "waiting", { timeout: 10_000 });
    assert.equal(await buyEnabled(page), false);
    for (let i = 0; !ahead.admitted; i += 1) {
      assert.ok(i < 100, "the first shopper was never admitted");
      await sleep(200);
      ahead = await (await fetch(`${stack.edgeUrl}/v1/queue/${sku}`, { headers: { authorization: `Bearer ${tokenFor(first)}`, "flashgate-queue-receipt": ahead.receipt } })).json();
    }
    const bought = await stack.purchase({ token: tokenFor(first), key: unique("k"), body: { sku, qty: 1 }, headers: { "flashgate-pass": ahead.pass } });
    assert.equal(bought.status, 201, bought.text);
    const soldAt = Date.now();
    await page.waitForFunction(() => document.getElementById("line").dataset.state === "sold_out", { timeout: 5_000 });
    const seenMs = Date.now() - soldAt;
    assert.equal(await text(page, "line"), "Sold out: nothing is left to buy.");
    assert.equal(await text(page, "countdown"), "Sold out.");
    assert.equal(await buyEnabled(page), false, "nothing to buy");
    await shot(page, "room-sold-out");

    // A restock of one unit: the page, next in line, is let in and buys.
    await putSale(sku, { stock: 1 });
    await page.waitForFunction(() => document.getElementById("line").dataset.state === "admitted", { timeout: 10_000 });
    await page.waitForFunction(() => !document.getElementById("buy").disabled, { timeout: 5_000 });
    assert.equal(await text(page, "countdown"), "On sale now.");
    await shot(page, "room-resumed");
    await page.click("#buy");
    assert.match(await finalState(page, "bought"), /^Bought! Order /);
    assert.equal(purchases.length, 1);
    assert.equal(orders(sku).n, 2);
    console.log(`the page showed sold_out ${seenMs} ms after the last unit's 201`);
    await context.close();
  });

  test("403 not_admitted (the room switched on after the page loaded) is shown in words, then the page joins the line", async () => {
    const sku = await putSale(unique("NOTADM"), { stock: 10 });
    const { page, context, purchases } = await open(sku);
    assert.equal(await buyEnabled(page), true);
    assert.equal(await page.$eval("#line", (e) => e.hidden), true, "no line without a room");
    // One admission per minute, and another shopper took the first.
    await putSale(sku, { stock: 10, waiting_room: { admit_per_minute: 1, pass_secs: 60 } });
    await warm(sku);
    await joinLine(sku, unique("first"));
    await page.click("#buy");
    const words = await finalState(page, "not_admitted");
    assert.match(words, /^Not your turn yet: you can buy once you are admitted from the line\.( You are number \d+ in line\.)?$/);
    assert.equal(purchases.length, 1);
    assert.equal(purchases[0].headers["flashgate-pass"], undefined);
    await page.waitForFunction(() => document.getElementById("line").dataset.state === "waiting", { timeout: 10_000 });
    assert.match(await text(page, "line"), /^You are number \d+ in line\. Estimated wait: /);
    assert.equal(await buyEnabled(page), false);
    await shot(page, "not-admitted");
    assert.deepEqual(orders(sku), { n: 0, keys: 0 });
    await context.close();
  });
});
