// End-to-end: bounds per network (issue 28) — at most N shoppers of one IPv4 /24 join a sale's
// waiting room and at most M units are bought by its shoppers, however many accounts they use,
// counted at the edge from CF-Connecting-IP only. Requests are sent from loopback addresses
// (127.A.B.C), so workerd sees them coming from different networks exactly as Cloudflare would
// set CF-Connecting-IP; X-Forwarded-For and the like, which any client can set, change nothing.
// The BUILT worker in workerd in front of the REAL origin; sales are read from the origin.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { Stack, assertProblem, originProxy, requestFrom, tokenFor, unique } from "./harness.mjs";

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

async function sale(extra = {}, { stock = 100, maxPerUser = 5 } = {}) {
  const sku = unique("NET");
  await stack.putSkuBody(sku, { name: "Shoe", price_cents: 1999, stock, max_per_user: maxPerUser, ...extra });
  for (const url of [stack.edgeUrl, held.url]) {
    const w = await stack.warmup([sku], undefined, url);
    assert.equal(w.status, 200, w.text);
  }
  return sku;
}

/** A purchase of `qty` by a fresh account, sent from the address `from`. */
function buyFrom(from, sku, { qty = 1, headers = {}, token = tokenFor(unique("acct")), edgeUrl = stack.edgeUrl } = {}) {
  return requestFrom(from, `${edgeUrl}/v1/purchases`, {
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

  test("a qty above what the network may still buy is told what it may, and not sent away for the window", async () => {
    // Issue 35: answered "your network bought the most" with Retry-After = the whole window, even
    // when the network bought nothing; a retry an hour later was refused the same way.
    const sku = await sale({ network_limits: { units: 3, window_secs: 600 } }, { maxPerUser: 10 });
    const five = await buyFrom("127.28.1.2", sku, { qty: 5 });
    assertProblem(five, 429, "network_limit");
    assert.match(five.json.detail, /may buy 3 more units of this sale now/);
    assert.equal(five.headers.get("retry-after"), null, "no wait makes 5 fit");
    assert.equal(five.headers.get("ratelimit"), '"network";r=3;t=600');
    // What it may, it buys at once; then one is left.
    assert.equal((await buyFrom("127.28.1.2", sku, { qty: 2 })).status, 201);
    const two = await buyFrom("127.28.1.3", sku, { qty: 2 });
    assertProblem(two, 429, "network_limit");
    assert.match(two.json.detail, /may buy 1 more unit of this sale now/);
    assert.equal((await buyFrom("127.28.1.3", sku, { qty: 1 })).status, 201);
    // Spent: now the window's end is the answer.
    const spent = await buyFrom("127.28.1.4", sku);
    assertProblem(spent, 429, "network_limit");
    assert.match(spent.json.detail, /bought the most/);
    assert.ok(Number(spent.headers.get("retry-after")) > 500, spent.headers.get("retry-after"));
  });

  test("6to4 addresses count in the /24 of the IPv4 address they embed", async () => {
    // Issue 35: 2002:AABB:CCDD::/16 embeds AA.BB.CC.DD; each was a /48 of its own, so one /24 was
    // 257 networks. Local workerd takes a client's CF-Connecting-IP as Cloudflare's would be.
    const stock = 50;
    const sku = await sale({ network_limits: { units: 1 } }, { stock });
    const from6to4 = (ip) => buyFrom("127.0.0.1", sku, { headers: { "cf-connecting-ip": ip } });
    // 2002:cb00:7107:: is 203.0.113.7.
    const first = await from6to4("2002:cb00:7107::1");
    assert.equal(first.status, 201, first.text);
    for (const ip of ["2002:cb00:7107:1::2", "2002:cb00:71fe::9", "203.0.113.99", "::ffff:203.0.113.5"]) {
      assertProblem(await from6to4(ip), 429, "network_limit", ip);
    }
    // Another /24, as 6to4 or not, is another network.
    assert.equal((await from6to4("2002:cb00:7207::1")).status, 201);
    assert.equal(stock - (await stack.originSku(sku)).body.stock, 2);
  });

  test("a neighbour waits for its network's slot instead of being refused busy", async () => {
    // Issue 35: one request per /24 at a time answered every other one "busy" at once.
    const sku = await sale({ network_limits: { units: 10 } });
    const hold = proxy.hold((method, path) => method === "POST" && path === "/v1/purchases");
    const token = tokenFor(unique("holder"));
    const first = buyFrom("127.29.1.2", sku, { token, edgeUrl: held.url });
    await hold.arrived;
    const neighbour = buyFrom("127.29.1.3", sku, { edgeUrl: held.url });
    // The same account again while it holds the slot: busy at once (one place per account).
    const again = await buyFrom("127.29.1.2", sku, { token, edgeUrl: held.url });
    assertProblem(again, 429, "network_limit");
    assert.equal(again.headers.get("retry-after"), "1");
    await new Promise((ok) => setTimeout(ok, 200));
    hold.release();
    const [a, b] = await Promise.all([first, neighbour]);
    assert.equal(a.status, 201, a.text);
    assert.equal(b.status, 201, `the neighbour waited its turn: ${b.text}`);
  });

  test("a unit sold while the edge timed out counts against its network when its key's replay tells", async () => {
    // Issue 35: the origin sold it after the edge gave up (503, key released); the edge never
    // counted it, so the /24 could buy its bound again.
    const stock = 20;
    const sku = await sale({ network_limits: { units: 1, window_secs: 600 } }, { stock });
    const token = tokenFor(unique("slow"));
    const key = unique("k");
    const hold = proxy.hold((method, path) => method === "POST" && path === "/v1/purchases");
    const lost = await (async () => {
      const r = buyFrom("127.30.1.2", sku, { token, headers: { "idempotency-key": key }, edgeUrl: held.url });
      await hold.arrived;
      // The origin sold it; its answer arrives after ORIGIN_TIMEOUT_MS (3 s).
      return r;
    })();
    assertProblem(lost, 503, "unavailable");
    hold.release();
    assert.equal(stock - (await stack.originSku(sku)).body.stock, 1, "sold at the origin");
    // The retry learns it: the origin's replay, counted now.
    const replay = await buyFrom("127.30.1.2", sku, { token, headers: { "idempotency-key": key }, edgeUrl: held.url });
    assert.equal(replay.status, 201, replay.text);
    assert.equal(replay.headers.get("idempotent-replayed"), "true");
    await new Promise((ok) => setTimeout(ok, 300));
    assertProblem(await buyFrom("127.30.1.3", sku, { edgeUrl: held.url }), 429, "network_limit");
    assert.equal(stock - (await stack.originSku(sku)).body.stock, 1, "the /24 bought its bound, no more");
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
