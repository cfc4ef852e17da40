// The REAL current ALTCHA widget (npm `altcha`, pinned in package.json: 3.x, whose `challenge`
// attribute replaced 1.x/2.x's `challengeurl`) on a shop's checkout page, in headless Chromium,
// against the BUILT worker in workerd in front of the REAL origin (edge/e2e/harness.mjs): the
// shopper ticks the widget's checkbox, the widget fetches a proof-of-work v2 challenge
// (`PBKDF2/SHA-256`) from the edge's `GET /v1/challenge?sku=…`, solves it in its own Web Workers
// and puts its payload in the form's hidden `altcha` field; the page buys with it in
// `Flashgate-Proof`. Configured exactly as docs/bot-defence.md tells shops ("The ALTCHA widget").
//
// The page is served at the edge's own origin (Chromium's request interception answers
// /__shop/*; everything else goes to the edge), as a shop serving its page and the edge under one
// host would: the widget's fetch of /v1/challenge is same-origin, with the shopper's token added
// by the widget's `fetch` option. The solve's time is recorded in
// $SALE_PAGE_ARTIFACTS/altcha-widget.json with a screenshot of the verified widget.
//
//   node --test edge/e2e/browser/altcha_widget.test.mjs   (after scripts/edge-build.sh and cargo build -p origin)
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { ARTIFACTS, launchChromium } from "./chromium.mjs";
import { Stack, tokenFor, unique } from "../harness.mjs";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const WIDGET_PACKAGE = JSON.parse(readFileSync(join(ROOT, "node_modules/altcha/package.json"), "utf8"));
const WIDGET_JS = readFileSync(join(ROOT, "node_modules/altcha/dist/main/altcha.js"), "utf8");

let stack;
let browser;
const record = [];

before(async () => {
  stack = new Stack();
  await stack.start();
  browser = await launchChromium();
});

after(async () => {
  writeFileSync(
    join(ARTIFACTS, "altcha-widget.json"),
    `${JSON.stringify({ altcha: WIDGET_PACKAGE.version, chromium: await browser?.version(), load_average_1m: Number(loadavg()[0].toFixed(2)), solves: record }, null, 2)}\n`,
  );
  await browser?.close();
  await stack?.stop();
});

/** The shop's checkout page: the widget as docs/bot-defence.md configures it, and a Buy button. */
function checkoutPage({ sku, token, key }) {
  const js = JSON.stringify;
  return `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Checkout</title>
  <script type="module" src="/__shop/altcha.js"></script>
</head>
<body>
  <form id="checkout">
    <altcha-widget challenge="/v1/challenge?sku=${encodeURIComponent(sku)}"></altcha-widget>
    <button id="buy" type="submit">Buy</button>
  </form>
  <p id="result" role="status"></p>
  <script type="module">
    const token = ${js(token)};
    await customElements.whenDefined("altcha-widget");
    const widget = document.querySelector("altcha-widget");
    // The edge binds each challenge to its shopper: the widget's requests carry the token.
    widget.configure({
      fetch: (url, init = {}) => fetch(url, { ...init, headers: { ...init.headers, authorization: "Bearer " + token } }),
    });
    widget.addEventListener("statechange", (e) => { document.body.dataset.altcha = e.detail.state; });
    document.getElementById("checkout").addEventListener("submit", async (e) => {
      e.preventDefault();
      const proof = new FormData(e.target).get("altcha");
      const res = await fetch("/v1/purchases", {
        method: "POST",
        headers: {
          authorization: "Bearer " + token,
          "content-type": "application/json",
          "idempotency-key": ${js(key)},
          "flashgate-proof": proof,
        },
        body: JSON.stringify({ sku: ${js(sku)}, qty: 1 }),
      });
      document.getElementById("result").textContent = res.status + " " + (await res.text());
    });
  </script>
</body>
</html>`;
}

/** A page at the edge's origin whose /__shop/* the test serves (the page and the widget's file). */
async function shopPage(html) {
  const page = await browser.newPage();
  const seen = [];
  await page.setRequestInterception(true);
  page.on("request", (req) => {
    const url = new URL(req.url());
    if (url.pathname === "/__shop/checkout.html") {
      return req.respond({ status: 200, contentType: "text/html; charset=utf-8", body: html });
    }
    if (url.pathname === "/__shop/altcha.js") {
      return req.respond({ status: 200, contentType: "text/javascript; charset=utf-8", body: WIDGET_JS });
    }
    seen.push(`${req.method()} ${url.pathname}${url.search}`);
    return req.continue();
  });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(`${stack.edgeUrl}/__shop/checkout.html`);
  return { page, seen, errors };
}

describe(`the ALTCHA widget ${WIDGET_PACKAGE.version} against the edge`, () => {
  test("solves a proof-of-work v2 challenge from GET /v1/challenge and buys with it, once", async () => {
    assert.match(WIDGET_PACKAGE.version, /^3\./, "the widget's current major");
    const sku = unique("WIDGET");
    // 14 bits: 1,024 counters of 16 PBKDF2 iterations, at most.
    await stack.putSkuBody(sku, {
      name: "Shoe", price_cents: 1999, stock: 10, max_per_user: 1,
      proof_of_work: { min_bits: 14, max_bits: 14, algorithm: "PBKDF2/SHA-256" },
    });
    assert.equal((await stack.warmup([sku])).status, 200);
    const user = unique("widget-shopper");
    const key = unique("k");
    const { page, seen, errors } = await shopPage(checkoutPage({ sku, token: tokenFor(user), key }));
    await page.waitForSelector("altcha-widget input[type=checkbox]");
    assert.equal(await page.evaluate(() => window.isSecureContext), true, "the widget needs a secure context");
    const started = Date.now();
    await page.click("altcha-widget input[type=checkbox]");
    await page.waitForFunction(() => document.body.dataset.altcha === "verified" || document.body.dataset.altcha === "error", { timeout: 60_000 });
    const ms = Date.now() - started;
    await page.screenshot({ path: join(ARTIFACTS, "altcha-widget-verified.png") });
    assert.equal(await page.evaluate(() => document.body.dataset.altcha), "verified", errors.join("\n"));
    assert.deepEqual(errors, []);
    assert.deepEqual(seen.filter((r) => r.startsWith("GET /v1/challenge")), [`GET /v1/challenge?sku=${sku}`]);
    // What the widget put in the form: ALTCHA v2's payload of the edge's challenge.
    const proof = await page.evaluate(() => new FormData(document.getElementById("checkout")).get("altcha"));
    const payload = JSON.parse(Buffer.from(proof, "base64").toString());
    assert.equal(payload.challenge.parameters.algorithm, "PBKDF2/SHA-256");
    assert.equal(payload.challenge.parameters.cost, 16);
    assert.deepEqual(payload.challenge.parameters.data.user, user);
    assert.equal(typeof payload.solution.counter, "number");
    assert.match(payload.solution.derivedKey, /^[0-9a-f]{64}$/);
    assert.ok(payload.solution.derivedKey.startsWith(payload.challenge.parameters.keyPrefix));
    record.push({ bits: 14, cost: payload.challenge.parameters.cost, counter: payload.solution.counter, widget_time_ms: payload.solution.time, click_to_verified_ms: ms });

    // The shopper buys: 201, an order on the origin.
    await page.click("#buy");
    await page.waitForFunction(() => document.getElementById("result").textContent !== "");
    const result = await page.$eval("#result", (p) => p.textContent);
    assert.match(result, /^201 /, result);
    const order = JSON.parse(result.slice(4));
    assert.equal(order.sku, sku);
    assert.equal((await stack.originSku(sku)).body.stock, 9);

    // The same proof again (a new key): spent, refused, nothing sold.
    const again = await page.evaluate(async (sku, proof, token) => {
      const res = await fetch("/v1/purchases", {
        method: "POST",
        headers: { authorization: "Bearer " + token, "content-type": "application/json", "idempotency-key": "again-" + Date.now(), "flashgate-proof": proof },
        body: JSON.stringify({ sku, qty: 1 }),
      });
      return { status: res.status, body: await res.json() };
    }, sku, proof, tokenFor(user));
    assert.equal(again.status, 403, JSON.stringify(again));
    assert.equal(again.body.code, "proof_rejected");
    assert.equal((await stack.originSku(sku)).body.stock, 9);
    await page.close();
  });
});
