// End-to-end: a retried Idempotency-Key under each defence (issue 35). The reason a key exists is
// a 201 lost on the way back: its retry must get that 201 (its stored answer) whatever the
// defences that guard NEW work say now — the network bound its own purchase filled, a waiting
// room pass that has expired since, the proof of work it spent buying, a sale paused since — at
// no origin cost and spending nothing; a key still in flight stays 409; and every refusal of new
// work is what it was. The BUILT worker in workerd in front of the REAL origin; "reached the
// origin" is the origin's own /metrics (`origin_purchase_requests_total`).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { solveChallenge } from "altcha-lib/v1";

import { Stack, assertProblem, mintPass, originProxy, requestFrom, response, tokenFor, unique } from "./harness.mjs";

const stack = new Stack();
/** An edge in front of a pass-through of the origin that can hold the origin's answers. */
let proxy;
let held;

before(async () => {
  await stack.start();
  proxy = await originProxy(stack.originUrl);
  held = await stack.startEdge({ ORIGIN_URL: proxy.url }, "held");
});

after(async () => {
  await held?.stop();
  await proxy?.close();
  await stack.stop();
});

/** A fresh SKU on sale with `extra` fields, warmed at both edges. */
async function sale(extra = {}, { stock = 100, maxPerUser = 5 } = {}) {
  const sku = unique("RETRY");
  await stack.putSkuBody(sku, { name: "Shoe", price_cents: 1999, stock, max_per_user: maxPerUser, ...extra });
  for (const url of [stack.edgeUrl, held.url]) {
    const w = await stack.warmup([sku], undefined, url);
    assert.equal(w.status, 200, w.text);
  }
  return sku;
}

/** A purchase of one unit by `token`'s shopper with `key`, from the loopback address `from`. */
function buy(sku, token, key, { from = "127.0.0.1", headers = {}, edgeUrl = stack.edgeUrl } = {}) {
  return requestFrom(from, `${edgeUrl}/v1/purchases`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${token}`, "idempotency-key": key, ...headers },
    body: { sku, qty: 1 },
  });
}

/** A solved proof of work for `token`'s shopper (altcha-lib's solver). */
async function proofFor(sku, token, edgeUrl = stack.edgeUrl) {
  const r = await response(await fetch(`${edgeUrl}/v1/challenge?sku=${sku}`, { headers: { authorization: `Bearer ${token}` } }));
  assert.equal(r.status, 200, r.text);
  const c = r.json;
  const solution = await solveChallenge(c.challenge, c.salt, c.algorithm, c.maxnumber).promise;
  return btoa(JSON.stringify({ algorithm: c.algorithm, challenge: c.challenge, number: solution.number, salt: c.salt, signature: c.signature }));
}

/** Asserts `retry` is the replay of `first` (a 201), and that it cost no origin call. */
async function assertReplay(first, retry, calls, context) {
  assert.equal(retry.status, 201, `${context}: ${retry.status} ${retry.text}`);
  assert.equal(retry.headers.get("idempotent-replayed"), "true", context);
  assert.equal(retry.text, first.text, `${context}: the stored 201, byte for byte`);
  assert.equal(await stack.originPurchaseCalls(), calls, `${context}: no origin call`);
}

describe("a retry of a key that bought gets its 201 whatever the defences of new work say now", () => {
  test("the network bound the shopper's own purchase filled", async () => {
    const sku = await sale({ network_limits: { units: 1, window_secs: 600 } });
    const token = tokenFor(unique("netbuyer"));
    const key = unique("k");
    const first = await buy(sku, token, key, { from: "127.31.1.2" });
    assert.equal(first.status, 201, first.text);
    const calls = await stack.originPurchaseCalls();
    // The /24's bound (1) is now full: new work of the network is refused…
    assertProblem(await buy(sku, tokenFor(unique("neighbour")), unique("k"), { from: "127.31.1.3" }), 429, "network_limit");
    // …but the retry of the key that filled it, from the same address or another of its /24, replays.
    await assertReplay(first, await buy(sku, token, key, { from: "127.31.1.2" }), calls, "same address");
    await assertReplay(first, await buy(sku, token, key, { from: "127.31.1.9" }), calls, "same /24");
    // A new key of the shopper is new work: still refused, and the replays counted nothing.
    assertProblem(await buy(sku, token, unique("k"), { from: "127.31.1.2" }), 429, "network_limit");
    assert.equal((await stack.originSku(sku)).body.stock, 99, "one unit sold");
  });

  test("a waiting room pass that expired since", async () => {
    const sku = await sale({ waiting_room: { admit_per_minute: 6000, pass_secs: 60 } });
    const user = unique("passer");
    const token = tokenFor(user);
    const key = unique("k");
    const expiresMs = Date.now() + 1_500;
    const pass = mintPass({ sku, user, expiresMs });
    const first = await buy(sku, token, key, { headers: { "flashgate-pass": pass } });
    assert.equal(first.status, 201, first.text);
    const calls = await stack.originPurchaseCalls();
    await sleep(Math.max(0, expiresMs - Date.now()) + 100);
    // The same pass, now expired, or none at all: the key's stored answer.
    await assertReplay(first, await buy(sku, token, key, { headers: { "flashgate-pass": pass } }), calls, "expired pass");
    await assertReplay(first, await buy(sku, token, key), calls, "no pass");
    // New work with the expired pass: 403 not_admitted as before.
    assertProblem(await buy(sku, token, unique("k"), { headers: { "flashgate-pass": pass } }), 403, "not_admitted");
    assert.equal(await stack.originPurchaseCalls(), calls);
  });

  test("the proof of work it spent buying", async () => {
    const sku = await sale({ proof_of_work: { min_bits: 4, max_bits: 8 } });
    const token = tokenFor(unique("solver"));
    const key = unique("k");
    const proof = await proofFor(sku, token);
    const first = await buy(sku, token, key, { headers: { "flashgate-proof": proof } });
    assert.equal(first.status, 201, first.text);
    const calls = await stack.originPurchaseCalls();
    // The identical retry (same key, same spent proof), and the retry without a proof.
    await assertReplay(first, await buy(sku, token, key, { headers: { "flashgate-proof": proof } }), calls, "same proof");
    await assertReplay(first, await buy(sku, token, key), calls, "no proof");
    // The spent proof with a new key is new work: 403 proof_rejected, "used before", as before.
    const again = await buy(sku, token, unique("k"), { headers: { "flashgate-proof": proof } });
    assertProblem(again, 403, "proof_rejected");
    assert.match(again.json.detail, /used before/);
    assert.equal(await stack.originPurchaseCalls(), calls);
  });

  test("a sale paused since", async () => {
    const sku = await sale();
    const token = tokenFor(unique("pausee"));
    const key = unique("k");
    const first = await buy(sku, token, key);
    assert.equal(first.status, 201, first.text);
    await stack.putSkuBody(sku, { paused: true });
    assert.equal((await stack.warmup([sku])).status, 200);
    const calls = await stack.originPurchaseCalls();
    await assertReplay(first, await buy(sku, token, key), calls, "paused");
    assertProblem(await buy(sku, token, unique("k")), 409, "sale_paused");
  });

  test("a key whose answer was lost to the edge's timeout is retried as that attempt: the origin's 201, not the cached sold_out or its spent proof", async () => {
    // Found by bench scalpers under load: the origin sold the last unit while the edge timed out
    // (503); the retry of the key met the edge's sold-out shield, or its proof "used before".
    const sku = await sale({ proof_of_work: { min_bits: 4, max_bits: 8 } }, { stock: 1 });
    const token = tokenFor(unique("timedout"));
    const key = unique("k");
    const proof = await proofFor(sku, token, held.url);
    const hold = proxy.hold((method, path) => method === "POST" && path === "/v1/purchases");
    const lost = buy(sku, token, key, { headers: { "flashgate-proof": proof }, edgeUrl: held.url });
    await hold.arrived;
    assertProblem(await lost, 503, "unavailable"); // ORIGIN_TIMEOUT_MS: 3 s
    hold.release();
    assert.equal((await stack.originSku(sku)).body.stock, 0, "the origin sold it");
    // The edge learns the sale is sold out.
    assert.equal((await stack.warmup([sku], undefined, held.url)).status, 200);
    const late = tokenFor(unique("late"));
    const lateProof = await proofFor(sku, late, held.url);
    assertProblem(await buy(sku, late, unique("k"), { headers: { "flashgate-proof": lateProof }, edgeUrl: held.url }), 409, "sold_out");
    const retry = await buy(sku, token, key, { headers: { "flashgate-proof": proof }, edgeUrl: held.url });
    assert.equal(retry.status, 201, retry.text);
    assert.equal(retry.headers.get("idempotent-replayed"), "true", "the origin's stored 201");
    // From then on the edge holds the answer.
    const calls = await stack.originPurchaseCalls();
    await assertReplay(retry, await buy(sku, token, key, { edgeUrl: held.url }), calls, "after it");
  });

  test("a key still in flight stays 409 idempotency_in_flight, even with its proof already spent", async () => {
    const sku = await sale({ proof_of_work: { min_bits: 4, max_bits: 8 } });
    const token = tokenFor(unique("inflight"));
    const key = unique("k");
    const proof = await proofFor(sku, token, held.url);
    const hold = proxy.hold((method, path) => method === "POST" && path === "/v1/purchases");
    const first = buy(sku, token, key, { headers: { "flashgate-proof": proof }, edgeUrl: held.url });
    await hold.arrived;
    // The first attempt spent the proof and holds the key: the same request is 409, not 403.
    const dup = await buy(sku, token, key, { headers: { "flashgate-proof": proof }, edgeUrl: held.url });
    assertProblem(dup, 409, "idempotency_in_flight");
    hold.release();
    const done = await first;
    assert.equal(done.status, 201, done.text);
    const calls = await stack.originPurchaseCalls();
    await assertReplay(done, await buy(sku, token, key, { headers: { "flashgate-proof": proof }, edgeUrl: held.url }), calls, "after it");
  });
});
