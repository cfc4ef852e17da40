// End-to-end: bounds per network (issue 28) — at most N shoppers of one IPv4 /24 join a sale's
// waiting room and at most M units are bought by its shoppers, however many accounts they use,
// counted at the edge from CF-Connecting-IP only. Requests are sent from loopback addresses
// (127.A.B.C), so workerd sees them coming from different networks exactly as Cloudflare would
// set CF-Connecting-IP; X-Forwarded-For and the like, which any client can set, change nothing.
// The BUILT worker in workerd in front of the REAL origin; sales are read from the origin.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { Stack, assertProblem, requestFrom, tokenFor, unique } from "./harness.mjs";

const stack = new Stack();

before(async () => {
  await stack.start();
});

after(async () => {
  await stack.stop();
});

async function sale(extra = {}, { stock = 100, maxPerUser = 5 } = {}) {
  const sku = unique("NET");
  await stack.putSkuBody(sku, { name: "Shoe", price_cents: 1999, stock, max_per_user: maxPerUser, ...extra });
  const w = await stack.warmup([sku]);
  assert.equal(w.status, 200, w.text);
  return sku;
}

/** A purchase of `qty` by a fresh account, sent from the address `from`. */
function buyFrom(from, sku, { qty = 1, headers = {}, token = tokenFor(unique("acct")) } = {}) {
  return requestFrom(from, `${stack.edgeUrl}/v1/purchases`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${token}`, "idempotency-key": unique("k"), ...headers },
    body: { sku, qty },
  });
}

/** Units sold of `sku`, by the origin. */
async function sold(sku, stock) {
  const v = await stack.originSku(sku);
  return stock - v.body.stock;
}

describe("network_limits.units", () => {
  test("a /24 buys at most its bound, whatever its accounts, and is told when to come back", async () => {
    const stock = 100;
    const sku = await sale({ network_limits: { units: 3, window_secs: 600 } }, { stock });
    // 12 accounts of 10.x's farm behind 127.20.1.0/24, in parallel; then more, one at a time.
    const parallel = await Promise.all(Array.from({ length: 12 }, (_, i) => buyFrom(`127.20.1.${i + 2}`, sku)));
    for (const r of parallel) {
      assert.ok([201, 429].includes(r.status), r.text);
      if (r.status === 429) assertProblem(r, 429, "network_limit");
    }
    const sequential = [];
    for (let i = 0; i < 6; i += 1) sequential.push(await buyFrom(`127.20.1.${100 + i}`, sku));
    const bought = [...parallel, ...sequential].filter((r) => r.status === 201).length;
    // One edge location: the bound exactly (the bound is exceeded by at most one purchase per
    // Worker instance in flight, docs/bot-defence.md; here there is one instance).
    assert.equal(bought, 3, "the /24's bound");
    assert.equal(await sold(sku, stock), 3, "as the origin counts it");
    const over = sequential.at(-1);
    assertProblem(over, 429, "network_limit");
    const retry = Number(over.headers.get("retry-after"));
    assert.ok(retry > 500 && retry <= 600, `Retry-After until the window ends: ${retry}`);
    assert.equal(over.headers.get("ratelimit-policy"), '"network";q=3;w=600');
    assert.equal(over.headers.get("ratelimit"), `"network";r=0;t=${retry}`);
    // Another /24 is not affected.
    const other = await buyFrom("127.20.2.2", sku);
    assert.equal(other.status, 201, other.text);
  });

  test("a forged X-Forwarded-For (or X-Real-IP, True-Client-IP) does not move a shopper to another network", async () => {
    const stock = 50;
    const sku = await sale({ network_limits: { units: 1 } }, { stock });
    const first = await buyFrom("127.21.1.2", sku);
    assert.equal(first.status, 201, first.text);
    for (const forged of [{ "x-forwarded-for": "198.51.100.7" }, { "x-real-ip": "198.51.100.8" }, { "true-client-ip": "198.51.100.9" }, { forwarded: "for=198.51.100.10" }]) {
      assertProblem(await buyFrom("127.21.1.3", sku, { headers: forged }), 429, "network_limit", JSON.stringify(forged));
    }
    assert.equal(await sold(sku, stock), 1);
  });

  test("a refusal is not stored with the key: the same key buys once the shopper's network may", async () => {
    const sku = await sale({ network_limits: { units: 2, window_secs: 2 } });
    const token = tokenFor(unique("patient"));
    assert.equal((await buyFrom("127.22.1.2", sku, { qty: 2 })).status, 201);
    const key = unique("k");
    const h = { "idempotency-key": key };
    assertProblem(await buyFrom("127.22.1.3", sku, { token, headers: h }), 429, "network_limit");
    await new Promise((ok) => setTimeout(ok, 2_100));
    const later = await buyFrom("127.22.1.3", sku, { token, headers: h });
    assert.equal(later.status, 201, later.text);
    assert.equal(later.headers.get("idempotent-replayed"), null);
  });

  test("without network_limits, a /24 buys as before", async () => {
    const stock = 30;
    const sku = await sale({}, { stock });
    const rs = await Promise.all(Array.from({ length: 10 }, (_, i) => buyFrom(`127.23.1.${i + 2}`, sku)));
    assert.deepEqual(rs.map((r) => r.status), Array(10).fill(201));
    assert.equal(await sold(sku, stock), 10);
  });
});

describe("network_limits with a waiting room", () => {
  test("the units bound holds for purchases with a pass too", async () => {
    const stock = 20;
    const sku = await sale({ waiting_room: { admit_per_minute: 6000, pass_secs: 60 }, network_limits: { units: 1 } }, { stock });
    const headers = (token, extra = {}) => ({ authorization: `Bearer ${token}`, ...extra });
    /** Joins from `from`, polls until admitted; the pass. */
    const admitted = async (from, token) => {
      const joined = await requestFrom(from, `${stack.edgeUrl}/v1/queue/${sku}`, { method: "POST", headers: headers(token) });
      assert.equal(joined.status, 200, joined.text);
      let a = joined.json;
      const started = Date.now();
      while (!a.admitted) {
        assert.ok(Date.now() - started < 20_000, JSON.stringify(a));
        await new Promise((ok) => setTimeout(ok, 200));
        const poll = await requestFrom(from, `${stack.edgeUrl}/v1/queue/${sku}`, { headers: headers(token, { "flashgate-queue-receipt": a.receipt }) });
        assert.equal(poll.status, 200, poll.text);
        a = poll.json;
      }
      return a.pass;
    };
    const [a, b] = [tokenFor(unique("a")), tokenFor(unique("b"))];
    const [passA, passB] = await Promise.all([admitted("127.25.1.2", a), admitted("127.25.1.3", b)]);
    const first = await buyFrom("127.25.1.2", sku, { token: a, headers: { "flashgate-pass": passA } });
    assert.equal(first.status, 201, first.text);
    assertProblem(await buyFrom("127.25.1.3", sku, { token: b, headers: { "flashgate-pass": passB } }), 429, "network_limit");
    assert.equal(await sold(sku, stock), 1);
  });
});

describe("network_limits.admissions", () => {
  test("at most N shoppers of a /24 join the waiting room; a member's re-join is free", async () => {
    const sku = await sale({ waiting_room: { admit_per_minute: 600, pass_secs: 60 }, network_limits: { admissions: 2 } });
    const join = (from, token) =>
      requestFrom(from, `${stack.edgeUrl}/v1/queue/${sku}`, { method: "POST", headers: { authorization: `Bearer ${token}` } });
    const a = tokenFor(unique("a"));
    const b = tokenFor(unique("b"));
    assert.equal((await join("127.24.1.2", a)).status, 200);
    assert.equal((await join("127.24.1.3", b)).status, 200);
    assert.equal((await join("127.24.1.2", a)).status, 200, "a member joining again is no new admission");
    const c = await join("127.24.1.4", tokenFor(unique("c")));
    assertProblem(c, 429, "network_limit");
    assert.equal(c.headers.get("ratelimit-policy"), '"network";q=2;w=3600');
    assert.equal((await join("127.24.2.2", tokenFor(unique("d")))).status, 200, "another /24");
  });
});
