// End-to-end: a shopper's own orders through the edge (GET /v1/orders/{id}, POST …/cancel), and
// units coming back (a cancellation, an expired hold) reopening the edge's sold-out shield within
// SKU_CACHE_TTL_SECS without a warmup. The BUILT worker in workerd in front of the REAL origin.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";

import { RATE_QUOTA, RATE_WINDOW_SECS, Stack, assertProblem, freePort, tokenFor, unique } from "./harness.mjs";

/** The edge's view TTL in this suite: short, so that "within SKU_CACHE_TTL_SECS" is quick to prove. */
const TTL_SECS = 2;

const stack = new Stack();

before(async () => {
  await stack.start({ SKU_CACHE_TTL_SECS: String(TTL_SECS) });
});

after(async () => {
  await stack.stop();
});

const user = () => unique("user");
const key = () => unique("key");
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

async function buy(token, sku, qty = 1) {
  return stack.purchase({ token, key: key(), body: { sku, qty } });
}

/**
 * Buys one unit of `sku`, one attempt every 200 ms (as `token`'s shopper, else each time a new
 * one), until a 201 or `deadlineMs` passes; every other answer must be a 409 with one of `codes`.
 * Returns { created, elapsedMs, attempts, seen }.
 */
async function buyWhenBack(sku, deadlineMs, { token, codes = ["sold_out"] } = {}) {
  const start = Date.now();
  let attempts = 0;
  const seen = new Set();
  while (Date.now() - start <= deadlineMs) {
    attempts += 1;
    const r = await buy(token ?? tokenFor(user()), sku);
    if (r.status === 201) return { created: r, elapsedMs: Date.now() - start, attempts, seen };
    assert.equal(r.status, 409, r.text);
    assert.ok(codes.includes(r.json?.code), `attempt ${attempts}: ${r.text}`);
    seen.add(r.json.code);
    await sleep(200);
  }
  return { created: null, elapsedMs: Date.now() - start, attempts, seen };
}

describe("a shopper's own orders through the edge", () => {
  test("GET shows the shopper's hold with expires_at; someone else's order is 404; a junk id is 400", async () => {
    const s = await stack.freshSku({ stock: 5, holdSecs: 600 });
    const alice = tokenFor(user());
    const k = key();
    const created = await stack.purchase({ token: alice, key: k, body: { sku: s, qty: 2 } });
    assert.equal(created.status, 201, created.text);
    assert.equal(created.json.status, "held", created.text);
    assert.ok(Date.parse(created.json.expires_at) > Date.now(), created.text);
    // The hold's 201 is stored and replayed by the edge byte for byte.
    const replay = await stack.purchase({ token: alice, key: k, body: { qty: 2, sku: s } });
    assert.equal(replay.status, 201);
    assert.equal(replay.headers.get("idempotent-replayed"), "true");
    assert.equal(replay.text, created.text);

    const id = created.json.order_id;
    assert.match(id, UUID);
    const mine = await stack.order(id, { token: alice });
    assert.equal(mine.status, 200, mine.text);
    assert.equal(mine.json.order_id, id);
    assert.equal(mine.json.sku, s);
    assert.equal(mine.json.qty, 2);
    assert.equal(mine.json.user, created.json.user);
    assert.equal(mine.json.status, "held");
    assert.equal(mine.json.expires_at && Date.parse(mine.json.expires_at), Date.parse(created.json.expires_at));
    for (const field of ["created_at", "updated_at"]) assert.ok(Date.parse(mine.json[field]), `${field}: ${mine.text}`);
    assert.equal(mine.headers.get("cache-control"), "private, no-store");
    // Its own rate-limit bucket, with the purchase quota and window.
    assert.equal(mine.headers.get("ratelimit-policy"), `"order";q=${RATE_QUOTA};w=${RATE_WINDOW_SECS}`);
    assert.match(mine.headers.get("ratelimit") ?? "", /^"order";r=\d+;t=\d+$/);
    // Upper-case ids name the same order.
    assert.equal((await stack.order(id.toUpperCase(), { token: alice })).json?.order_id, id);

    // Someone else's order, and an order that does not exist: the origin's 404.
    const bob = tokenFor(user());
    const theirs = await stack.order(id, { token: bob });
    assert.equal(theirs.status, 404, theirs.text);
    assert.match(theirs.headers.get("content-type") ?? "", /^application\/problem\+json/);
    assert.equal((await stack.order(id, { token: bob, cancel: true })).status, 404);
    assert.equal((await stack.order("01234567-89ab-7def-8123-456789abcdef", { token: alice })).status, 404);
    assert.equal((await stack.order(id, { token: alice })).json.status, "held", "bob's cancel changed nothing");

    // Refused at the edge: no token, a junk id.
    assertProblem(await stack.order(id), 401, "unauthenticated");
    assertProblem(await stack.order(id, { cancel: true }), 401, "unauthenticated");
    for (const junk of ["junk", "1", `${id}0`, id.replaceAll("-", ""), `{${id}}`]) {
      assertProblem(await stack.order(junk, { token: alice }), 400, "invalid_request", junk);
    }
    const wrong = await stack.get(`/v1/orders/${id}/cancel`, { authorization: `Bearer ${alice}` });
    assertProblem(wrong, 405, "method_not_allowed");
    assert.equal(wrong.headers.get("allow"), "POST");
    assertProblem(await stack.order(`${id}/pay`, { token: alice }), 404, "not_found");
  });

  test("a purchase of a SKU without holds is confirmed", async () => {
    const s = await stack.freshSku({ stock: 5 });
    const alice = tokenFor(user());
    const created = await buy(alice, s);
    assert.equal(created.status, 201, created.text);
    assert.equal(created.json.status, "confirmed", created.text);
    assert.equal(created.json.expires_at, undefined, created.text);
    const mine = await stack.order(created.json.order_id, { token: alice });
    assert.equal(mine.json?.status, "confirmed", mine.text);
    assert.equal(mine.json.expires_at, undefined, mine.text);
  });

  test("an origin that cannot be reached is 503 with Retry-After", async () => {
    const dead = await stack.startEdge({ ORIGIN_URL: `http://127.0.0.1:${await freePort()}`, ORIGIN_TIMEOUT_MS: "1000" }, "dead-origin");
    try {
      const alice = tokenFor(user());
      for (const cancel of [false, true]) {
        const r = await stack.order("01234567-89ab-7def-8123-456789abcdef", { token: alice, cancel, edgeUrl: dead.url });
        assertProblem(r, 503, "unavailable", `cancel=${cancel}`);
        assert.ok(Number(r.headers.get("retry-after")) >= 1, r.text);
      }
    } finally {
      await dead.stop();
    }
  });
});

describe("units that come back reopen the edge's sold-out shield without a warmup", () => {
  test("a shopper cancels their hold: the unit is back, and a new shopper buys it through the edge", async () => {
    const s = await stack.freshSku({ stock: 1, holdSecs: 600, maxPerUser: 5 });
    const alice = tokenFor(user());
    const held = await buy(alice, s);
    assert.equal(held.status, 201, held.text);
    assert.equal(held.json.remaining, 0);

    // Sold out at the edge: the shield answers, the origin is not asked to sell.
    const before = await stack.originPurchaseCalls();
    for (let i = 0; i < 3; i += 1) assertProblem(await buy(tokenFor(user()), s), 409, "sold_out");
    assert.equal(await stack.originPurchaseCalls(), before, "answered by the edge's shield");

    const id = held.json.order_id;
    const cancelled = await stack.order(id, { token: alice, cancel: true });
    assert.equal(cancelled.status, 200, cancelled.text);
    assert.equal(cancelled.json.status, "cancelled", cancelled.text);
    assert.equal(cancelled.json.order_id, id);
    // Idempotent: the same answer, nothing changes.
    const again = await stack.order(id, { token: alice, cancel: true });
    assert.equal(again.status, 200, again.text);
    assert.equal(again.json.status, "cancelled");
    assert.equal((await stack.order(id, { token: alice })).json?.status, "cancelled");
    assert.equal((await stack.originSku(s)).body.stock, 1, "the unit is back at the origin");

    // No warmup, no view: the next purchases find it within SKU_CACHE_TTL_SECS.
    const back = await buyWhenBack(s, TTL_SECS * 1000 + 1500);
    assert.ok(back.created, `not bought back within ${back.elapsedMs} ms (${back.attempts} attempts)\n${stack.logs()}`);
    assert.equal(back.created.json.remaining, 0);
    assert.ok(back.elapsedMs <= TTL_SECS * 1000 + 1500, `${back.elapsedMs} ms`);
    // And it is sold out again for the next one.
    assertProblem(await buy(tokenFor(user()), s), 409, "sold_out");
  });

  test("a hold that expires (hold_secs: 1) reopens the shield, and gives the shopper's allowance back at the edge too", async () => {
    const s = await stack.freshSku({ stock: 1, holdSecs: 1, maxPerUser: 1 });
    const w = await stack.warmup([s]); // the edge knows the cap (and, then, that it is sold out)
    assert.equal(w.status, 200, w.text);
    const alice = tokenFor(user());
    const held = await buy(alice, s);
    assert.equal(held.status, 201, held.text);
    assert.equal(held.json.status, "held");
    const before = await stack.originPurchaseCalls();
    assertProblem(await buy(tokenFor(user()), s), 409, "sold_out");
    assertProblem(await buy(alice, s), 409, "sold_out");
    assert.equal(await stack.originPurchaseCalls(), before, "answered by the edge's shield");

    // The hold expires at 1 s and its unit is back within 2 s of that (origin contract); the
    // edge learns it within SKU_CACHE_TTL_SECS — both that the SKU has stock again and that
    // alice, at max_per_user 1 with the held unit, may buy again.
    const budgetMs = 1000 + 2000 + TTL_SECS * 1000 + 1000;
    const back = await buyWhenBack(s, budgetMs, { token: alice, codes: ["sold_out", "purchase_limit"] });
    assert.ok(back.created, `not bought back within ${back.elapsedMs} ms (${back.attempts} attempts, saw ${[...back.seen]})\n${stack.logs()}`);
    assert.equal((await stack.order(held.json.order_id, { token: alice })).json?.status, "expired");
    assertProblem(await buy(tokenFor(user()), s), 409, "sold_out");
  });

  test("a shopper at max_per_user who cancels may buy again through the edge", async () => {
    const s = await stack.freshSku({ stock: 10, holdSecs: 600, maxPerUser: 1 });
    const w = await stack.warmup([s]);
    assert.equal(w.status, 200, w.text);
    const alice = tokenFor(user());
    const first = await buy(alice, s);
    assert.equal(first.status, 201, first.text);
    const before = await stack.originPurchaseCalls();
    assertProblem(await buy(alice, s), 409, "purchase_limit");
    assert.equal(await stack.originPurchaseCalls(), before, "the edge's cap pre-check answered");

    const cancelled = await stack.order(first.json.order_id, { token: alice, cancel: true });
    assert.equal(cancelled.status, 200, cancelled.text);
    const again = await buy(alice, s);
    assert.equal(again.status, 201, again.text);
    // A repeated cancel of the first order gives nothing back twice.
    assert.equal((await stack.order(first.json.order_id, { token: alice, cancel: true })).status, 200);
    assertProblem(await buy(alice, s), 409, "purchase_limit");
  });
});
