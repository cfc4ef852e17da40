// End-to-end: the sale schedule (issue 16) — `not_started`, `sale_paused` and `sale_ended`
// answered by the edge from its cached SKU facts without an origin call, the origin staying the
// authority. The BUILT worker in workerd in front of the REAL origin; "reached the origin" is read
// from the origin's own /metrics (`origin_purchase_requests_total`), never from the edge.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";

import { RATE_QUOTA, Stack, assertProblem, rfc3339, tokenFor, unique } from "./harness.mjs";

/** The edge's view TTL in this suite: short, so that "within SKU_CACHE_TTL_SECS" is quick to prove. */
const TTL_SECS = 2;
/** The edge's clock margin (the default, named so the waits below are explicit). */
const MARGIN_MS = 2000;
/** Purchase attempts sent before the start (E2E_SCHEDULE_ATTEMPTS), and how many at a time. */
const ATTEMPTS = Number(process.env.E2E_SCHEDULE_ATTEMPTS ?? 10_000);
const CONCURRENCY = 32;

const stack = new Stack();

before(async () => {
  await stack.start({ SKU_CACHE_TTL_SECS: String(TTL_SECS), SCHEDULE_CLOCK_MARGIN_MS: String(MARGIN_MS) });
});

after(async () => {
  await stack.stop();
});

const put = (sku, body) => stack.putSkuBody(sku, body);

async function warm(sku) {
  const r = await stack.warmup([sku]);
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json.warmed, [sku], r.text);
}

function retryAfter(r) {
  const v = r.headers.get("retry-after");
  return v === null ? null : Number(v);
}

/** Runs `n` calls of `one(i)` with at most `concurrency` in flight; resolves when all are done. */
async function pool(n, concurrency, one) {
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next;
      next += 1;
      await one(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(n, concurrency) }, worker));
}

describe("the sale schedule at the edge", () => {
  test(`${ATTEMPTS} attempts before the start reach the origin 0 times and cost no rate; the first attempt after the start is decided`, async () => {
    const sku = unique("SCHED");
    const farStart = rfc3339(Date.now() + 3_600_000);
    const view = await put(sku, { name: "Shoe", price_cents: 1999, stock: 100, max_per_user: 5, starts_at: farStart });
    assert.equal(view.starts_at, farStart);
    await warm(sku);
    // The view shows the schedule to shoppers too.
    const shown = await stack.get(`/v1/skus/${sku}`);
    assert.equal(shown.status, 200, shown.text);
    assert.deepEqual([shown.json.starts_at, shown.json.ends_at, shown.json.paused], [farStart, null, false]);

    // One shopper, far more attempts than the rate limit allows (RATE_QUOTA per hour): a refused
    // attempt must cost neither an origin call nor rate. One key is retried throughout.
    const shopper = tokenFor(unique("early"));
    const kept = unique("kept");
    const before = await stack.originPurchaseCalls();
    const started = Date.now();
    let refused = 0;
    await pool(ATTEMPTS, CONCURRENCY, async (i) => {
      const key = i % 10 === 0 ? kept : unique("k");
      const r = await stack.purchase({ token: shopper, key, body: { sku, qty: 1 } });
      assertProblem(r, 409, "not_started", `attempt ${i}`);
      assert.equal(r.json.starts_at, farStart, r.text);
      // Whole seconds to the start by the edge's clock (this machine's).
      const after = retryAfter(r);
      const toStart = (Date.parse(farStart) - Date.now()) / 1000;
      assert.ok(Number.isInteger(after) && Math.abs(after - toStart) <= 3, `Retry-After ${after}, ${toStart} s to the start`);
      refused += 1;
    });
    assert.equal(refused, ATTEMPTS);
    assert.ok(ATTEMPTS > RATE_QUOTA);
    assert.equal(await stack.originPurchaseCalls(), before, "no attempt before the start reached the origin");
    console.log(`${ATTEMPTS} attempts before the start in ${Date.now() - started} ms, 0 origin purchase calls`);

    // The operator moves the start to a few seconds from now and warms the edge again.
    const startMs = Math.ceil((Date.now() + 4_000) / 1000) * 1000;
    await put(sku, { starts_at: rfc3339(startMs) });
    await warm(sku);
    const early = await stack.purchase({ token: shopper, key: kept, body: { sku, qty: 1 } });
    if (Date.now() < startMs - MARGIN_MS) {
      assertProblem(early, 409, "not_started");
      assert.equal(early.json.starts_at, rfc3339(startMs));
    }
    // The first attempt after the start (by this machine's clock, which the edge and the
    // database share): the same shopper and the same key, decided by the origin.
    await sleep(Math.max(0, startMs - Date.now()) + 50);
    const calls = await stack.originPurchaseCalls();
    const bought = await stack.purchase({ token: shopper, key: kept, body: { sku, qty: 1 } });
    assert.equal(bought.status, 201, bought.text);
    assert.equal(bought.json.remaining, 99, bought.text);
    assert.equal(await stack.originPurchaseCalls(), calls + 1);
  });

  test("a pause stops the sale at the edge within one SKU_CACHE_TTL_SECS, and an unpause reopens it", async () => {
    const sku = unique("PAUSE");
    await put(sku, { name: "Shoe", price_cents: 1999, stock: 100, max_per_user: 5 });
    await warm(sku);
    const first = await stack.purchase({ token: tokenFor(unique("u")), key: unique("k"), body: { sku, qty: 1 } });
    assert.equal(first.status, 201, first.text);

    const paused = await put(sku, { paused: true });
    assert.deepEqual([paused.paused, paused.stock], [true, 99]);
    const pausedAt = Date.now();
    // From now on every answer is sale_paused (the origin's at once, or the edge's).
    const attempt = async () => {
      const r = await stack.purchase({ token: tokenFor(unique("u")), key: unique("k"), body: { sku, qty: 1 } });
      assertProblem(r, 409, "sale_paused");
      assert.equal(retryAfter(r), 5, r.text);
    };
    while (Date.now() - pausedAt < TTL_SECS * 1000) {
      await attempt();
      await sleep(100);
    }
    // One TTL after the pause, the edge answers alone.
    const calls = await stack.originPurchaseCalls();
    for (let i = 0; i < 20; i += 1) await attempt();
    assert.equal(await stack.originPurchaseCalls(), calls, "paused attempts answered at the edge");

    // Unpaused: within one TTL the edge lets purchases through again (the same key buys).
    await put(sku, { paused: false });
    const resumedAt = Date.now();
    const shopper = tokenFor(unique("back"));
    const k = unique("k");
    let r;
    do {
      r = await stack.purchase({ token: shopper, key: k, body: { sku, qty: 1 } });
      if (r.status === 201) break;
      assertProblem(r, 409, "sale_paused");
      await sleep(200);
    } while (Date.now() - resumedAt <= TTL_SECS * 1000 + 1500);
    assert.equal(r.status, 201, `still refused ${Date.now() - resumedAt} ms after the unpause: ${r.text}`);
  });

  test("after the end, sale_ended at the edge; a key that bought before the end still replays", async () => {
    const sku = unique("END");
    const endMs = Math.ceil((Date.now() + 2_000) / 1000) * 1000;
    await put(sku, { name: "Shoe", price_cents: 1999, stock: 100, max_per_user: 5, ends_at: rfc3339(endMs) });
    await warm(sku);
    const shopper = tokenFor(unique("u"));
    const k = unique("k");
    const bought = await stack.purchase({ token: shopper, key: k, body: { sku, qty: 1 } });
    assert.equal(bought.status, 201, bought.text);

    // Past the end and the edge's margin.
    await sleep(Math.max(0, endMs + MARGIN_MS - Date.now()) + 300);
    const calls = await stack.originPurchaseCalls();
    for (let i = 0; i < 5; i += 1) {
      const r = await stack.purchase({ token: tokenFor(unique("late")), key: unique("k"), body: { sku, qty: 1 } });
      assertProblem(r, 409, "sale_ended");
      assert.equal(r.json.ends_at, rfc3339(endMs), r.text);
      assert.equal(retryAfter(r), null, "nothing to wait for");
    }
    const replay = await stack.purchase({ token: shopper, key: k, body: { sku, qty: 1 } });
    assert.equal(replay.status, 201, replay.text);
    assert.equal(replay.headers.get("idempotent-replayed"), "true");
    assert.equal(replay.json.order_id, bought.json.order_id);
    assert.equal(await stack.originPurchaseCalls(), calls, "answered at the edge");
  });
});
