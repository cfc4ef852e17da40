// End-to-end: the waiting room (issue 17) — join, poll, admission at the set rate, the pass a
// purchase needs, the pre-queue lottery at the start and first-come admission after it — and
// the room that knows the stock (issue 36): admission within `remaining × overbook`, the
// `sold_out` phase reaching those in line, the resume when units come back. The BUILT
// worker in workerd (its RoomShard / RoomCoordinator Durable Objects) in front of the REAL
// origin; "reached the origin" is read from the origin's own /metrics
// (`origin_purchase_requests_total`), never from the edge.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

import { ADMIN_TOKEN, ROOM_SECRET, Stack, assertProblem, mintPass, response, rfc3339, tokenFor, unique } from "./harness.mjs";

/** 100 admissions per second: the suite's rooms admit fast, so the file stays short. */
const FAST = { admit_per_minute: 6000, pass_secs: 60 };

const stack = new Stack();

before(async () => {
  await stack.start();
});

after(async () => {
  await stack.stop();
});

const put = (sku, body) => stack.putSkuBody(sku, body);

/** A fresh SKU on sale with `extra` fields (a room, a start), warmed at the edge. */
async function sale(extra, stock = 100) {
  const sku = unique("ROOM");
  const view = await put(sku, { name: "Shoe", price_cents: 1999, stock, max_per_user: 5, ...extra });
  const w = await stack.warmup([sku]);
  assert.equal(w.status, 200, w.text);
  return { sku, view };
}

/** `POST` (join) or `GET` (poll) `/v1/queue/{sku}` as `token`'s shopper. */
async function queue(sku, { token, join = false, receipt, headers = {} }) {
  const h = { ...headers };
  if (token !== undefined) h.authorization = `Bearer ${token}`;
  if (receipt !== undefined) h["flashgate-queue-receipt"] = receipt;
  return response(await fetch(`${stack.edgeUrl}/v1/queue/${sku}`, { method: join ? "POST" : "GET", headers: h }));
}

function assertAnswer(r, context = "") {
  assert.equal(r.status, 200, `${context}: ${r.text}`);
  const a = r.json;
  assert.ok(Number.isInteger(a.position) && a.position >= 0, r.text);
  assert.equal(typeof a.admitted, "boolean", r.text);
  assert.ok(Number.isInteger(a.estimated_wait_secs) && a.estimated_wait_secs >= 0, r.text);
  assert.equal(a.admitted, typeof a.pass === "string", `a pass exactly when admitted: ${r.text}`);
  return a;
}

/** Polls (with the receipt) until admitted; the last answer. */
async function untilAdmitted(sku, token, first) {
  let a = first;
  const started = Date.now();
  while (!a.admitted) {
    assert.ok(Date.now() - started < 20_000, `not admitted after 20 s: ${JSON.stringify(a)}`);
    await sleep(150);
    a = assertAnswer(await queue(sku, { token, receipt: a.receipt }), "poll");
  }
  return a;
}

/** The instant (ms) a pass's holder was admitted: its expiry minus pass_secs. */
const admittedAt = (a, passSecs) => Date.parse(a.pass_expires_at) - passSecs * 1000;

/** The pre-queue lottery ticket the edge draws for `user` (HMAC of the room secret). */
function ticket(sku, user) {
  const mac = createHmac("sha256", ROOM_SECRET).update(`flashgate-room-ticket-v1\n${sku}\n${user}`).digest();
  return mac.readBigUInt64BE(0);
}

async function buy(sku, token, pass, headers = {}) {
  const h = { ...headers };
  if (pass !== undefined) h["flashgate-pass"] = pass;
  return stack.purchase({ token, key: unique("k"), body: { sku, qty: 1 }, headers: h });
}

describe("the waiting room at the edge", () => {
  test("join, poll, admission, purchase with the pass; without a valid pass 403 not_admitted and no origin call", async () => {
    const { sku, view } = await sale({ waiting_room: FAST });
    // Without an overbook the view shows the default, 1.5 (issue 36).
    assert.deepEqual(view.waiting_room, { ...FAST, overbook: 1.5 });
    const { sku: other } = await sale({ waiting_room: FAST });
    const shown = await stack.get(`/v1/skus/${sku}`);
    assert.deepEqual(shown.json.waiting_room, { ...FAST, overbook: 1.5 }, shown.text);

    const alice = unique("alice");
    const token = tokenFor(alice);
    const joined = assertAnswer(await queue(sku, { token, join: true }), "join");
    assert.equal(typeof joined.receipt, "string");
    // Joining again keeps the place: the same join instant, no later place.
    const again = assertAnswer(await queue(sku, { token, join: true }), "rejoin");
    assert.equal(again.joined_at, joined.joined_at);
    assert.ok(again.position <= joined.position || again.admitted, `${again.position} > ${joined.position}`);
    // A poll without the receipt finds the same member.
    const polled = assertAnswer(await queue(sku, { token }), "poll without receipt");
    assert.equal(polled.joined_at, joined.joined_at);

    const admitted = await untilAdmitted(sku, token, joined);
    assert.equal(admitted.phase, "admitted");
    const pass = admitted.pass;
    assert.ok(Date.parse(admitted.pass_expires_at) > Date.now());
    assert.ok(Date.parse(admitted.pass_expires_at) - Date.now() <= FAST.pass_secs * 1000);

    // Every refusal: 403 not_admitted, Retry-After, `position`, and the origin never asked.
    const bob = unique("bob");
    const calls = await stack.originPurchaseCalls();
    const refusals = [
      ["no pass", () => buy(sku, token), 0],
      ["a forged pass (expiry stretched)", () => buy(sku, token, pass.replace(/\.(\d+)\./, (_, ms) => `.${Number(ms) + 3_600_000}.`)), 0],
      ["a pass signed with another secret", () => buy(sku, token, mintPass({ sku, user: alice, expiresMs: Date.now() + 60_000, secret: "not-the-room-secret-0123" })), 0],
      ["an expired pass", () => buy(sku, token, mintPass({ sku, user: alice, expiresMs: Date.now() - 1_000 })), 0],
      ["another shopper's pass", () => buy(sku, tokenFor(bob), pass), null],
      ["another SKU's pass", () => buy(other, token, pass), null],
      ["garbage", () => buy(sku, token, "p1.r1.x.y"), 0],
    ];
    for (const [what, attempt, position] of refusals) {
      const r = await attempt();
      assertProblem(r, 403, "not_admitted", what);
      assert.ok(Number(r.headers.get("retry-after")) >= 1, `${what}: Retry-After ${r.headers.get("retry-after")}`);
      assert.ok("position" in r.json, `${what}: ${r.text}`);
      assert.equal(r.json.position, position, `${what}: ${r.text}`);
    }
    assert.equal(await stack.originPurchaseCalls(), calls, "no refused purchase reached the origin");

    // The pass buys, by Bearer token and by the sale page's cookie (with the CSRF header).
    const bought = await buy(sku, token, pass);
    assert.equal(bought.status, 201, bought.text);
    const cookie = { cookie: `flashgate_session=${token}`, "x-flashgate-csrf": "1" };
    const byCookie = await stack.purchase({ key: unique("k"), body: { sku, qty: 1 }, headers: { ...cookie, "flashgate-pass": pass } });
    assert.equal(byCookie.status, 201, byCookie.text);
    assert.equal(await stack.originPurchaseCalls(), calls + 2);
    // The cookie joins and polls too.
    const viaCookie = assertAnswer(await queue(sku, { headers: cookie }), "poll by cookie");
    assert.equal(viaCookie.joined_at, joined.joined_at);
  });

  test("queue answers: not joined 404 not_in_queue, no room 409 no_waiting_room, unknown SKU 404, no token 401; admin stats", async () => {
    const { sku } = await sale({ waiting_room: FAST });
    const token = tokenFor(unique("carol"));
    assertProblem(await queue(sku, { token }), 404, "not_in_queue");
    const { sku: plain } = await sale({});
    assertProblem(await queue(plain, { token, join: true }), 409, "no_waiting_room");
    assertProblem(await queue(plain, { token }), 409, "no_waiting_room");
    assertProblem(await queue(unique("NOSUCH"), { token, join: true }), 404, "unknown_sku");
    assertProblem(await queue(sku, { join: true }), 401, "unauthenticated");
    // A purchase of a SKU without a room needs no pass.
    const free = await buy(plain, token);
    assert.equal(free.status, 201, free.text);

    assertAnswer(await queue(sku, { token, join: true }), "join");
    const stats = await stack.get(`/v1/queue/${sku}/stats`, { authorization: `Bearer ${ADMIN_TOKEN}` });
    assert.equal(stats.status, 200, stats.text);
    assert.ok(Number.isInteger(stats.json.joined) && Number.isInteger(stats.json.admitted), stats.text);
    assert.equal(stats.json.admit_per_minute, FAST.admit_per_minute, stats.text);
    assert.equal(typeof stats.json.started, "boolean");
    assert.equal(stats.json.objects.length, 33, "the coordinator and 32 shards");
    for (const o of stats.json.objects) {
      assert.equal(typeof o.name, "string");
      assert.ok(Number.isInteger(o.requests) && Number.isInteger(o.peak_requests_per_sec), JSON.stringify(o));
    }
    assertProblem(await stack.get(`/v1/queue/${sku}/stats`), 401, "unauthorized");
  });

  test("joins and polls are rate-limited per shopper like purchases: 429 with RateLimit fields", async () => {
    // Issue 35: joins and polls had no per-shopper limit. An edge with a queue limit of 3 per 10 s.
    const edge = await stack.startEdge({ QUEUE_RATE_LIMIT_QUOTA: "3", QUEUE_RATE_LIMIT_WINDOW_SECS: "10" }, "queue-limit");
    try {
      const { sku } = await sale({ waiting_room: FAST });
      const w = await stack.warmup([sku], undefined, edge.url);
      assert.equal(w.status, 200, w.text);
      const token = tokenFor(unique("hammer"));
      const call = (join, receipt) =>
        fetch(`${edge.url}/v1/queue/${sku}`, {
          method: join ? "POST" : "GET",
          headers: { authorization: `Bearer ${token}`, ...(receipt ? { "flashgate-queue-receipt": receipt } : {}) },
        }).then(response);
      const joined = assertAnswer(await call(true), "join");
      assert.equal(joined.receipt !== undefined, true);
      const first = await call(false, joined.receipt);
      assert.equal(first.status, 200, first.text);
      assert.equal(first.headers.get("ratelimit-policy"), '"queue";q=3;w=10');
      assert.match(first.headers.get("ratelimit"), /^"queue";r=1;t=[1-7]$/);
      // The third poll is the quota's last; then polls (from the cache or not) and joins are 429.
      assert.equal((await call(false, joined.receipt)).status, 200);
      for (const r of [await call(false, joined.receipt), await call(false), await call(true)]) {
        assertProblem(r, 429, "rate_limited");
        const retry = Number(r.headers.get("retry-after"));
        assert.ok(retry >= 1 && retry <= 4, r.headers.get("retry-after"));
        assert.equal(r.headers.get("ratelimit"), `"queue";r=0;t=${retry}`);
      }
      // Another shopper is not affected.
      const other = await fetch(`${edge.url}/v1/queue/${sku}`, { method: "POST", headers: { authorization: `Bearer ${tokenFor(unique("calm"))}` } }).then(response);
      assertAnswer(other, "another shopper's join");
    } finally {
      await edge.stop();
    }
  });

  test("everyone who joins before the start is admitted in the lottery's order, each with a pass that buys", async () => {
    const startMs = Math.ceil((Date.now() + 4_000) / 1000) * 1000;
    const { sku } = await sale({ waiting_room: FAST, starts_at: rfc3339(startMs) });
    const users = Array.from({ length: 12 }, () => unique("early"));
    const answers = [];
    for (const user of users) {
      const a = assertAnswer(await queue(sku, { token: tokenFor(user), join: true }), "pre-queue join");
      assert.equal(a.phase, "pre_queue", JSON.stringify(a));
      assert.equal(a.admitted, false);
      answers.push(a);
    }
    assert.ok(Date.now() < startMs, "all joined before the start");
    const admitted = [];
    for (const [i, user] of users.entries()) {
      const a = await untilAdmitted(sku, tokenFor(user), answers[i]);
      admitted.push({ user, at: admittedAt(a, FAST.pass_secs), pass: a.pass });
    }
    assert.ok(admitted.every((a) => a.at >= startMs), "nobody before the start");
    const order = [...admitted].sort((a, b) => a.at - b.at).map((a) => a.user);
    const lottery = [...users].sort((a, b) => (ticket(sku, a) < ticket(sku, b) ? -1 : 1));
    assert.deepEqual(order, lottery, "admitted in ticket order");
    assert.notDeepEqual(order, users, "not in join order");
    const calls = await stack.originPurchaseCalls();
    for (const a of admitted) {
      const r = await buy(sku, tokenFor(a.user), a.pass);
      assert.equal(r.status, 201, r.text);
    }
    assert.equal(await stack.originPurchaseCalls(), calls + users.length);
  });

  test("after the start, shoppers are admitted in join order, at most the set rate", async () => {
    const room = { admit_per_minute: 600, pass_secs: 60 };
    const { sku } = await sale({ waiting_room: room });
    const users = [];
    const answers = [];
    for (let i = 0; i < 10; i += 1) {
      const user = unique("late");
      answers.push(assertAnswer(await queue(sku, { token: tokenFor(user), join: true }), "join"));
      users.push(user);
      await sleep(5);
    }
    const ats = [];
    for (const [i, user] of users.entries()) {
      ats.push(admittedAt(await untilAdmitted(sku, tokenFor(user), answers[i]), room.pass_secs));
    }
    for (let i = 1; i < ats.length; i += 1) {
      assert.ok(ats[i] > ats[i - 1], `admitted out of join order: ${ats}`);
      assert.ok(ats[i] - ats[i - 1] >= 100, `closer than 60 s / 600: ${ats}`);
    }
  });

  test("fail closed: an edge without ROOM_SECRETS answers 503 for a SKU with a room, and forwards nothing", async () => {
    const { sku } = await sale({ waiting_room: FAST });
    const edge = await stack.startEdge({ ROOM_SECRETS: "" }, "wrangler-no-room-secret");
    try {
      assert.equal((await stack.warmup([sku], ADMIN_TOKEN, edge.url)).status, 200);
      const token = tokenFor(unique("dan"));
      const calls = await stack.originPurchaseCalls();
      const joined = response(await fetch(`${edge.url}/v1/queue/${sku}`, { method: "POST", headers: { authorization: `Bearer ${token}` } }));
      assertProblem(await joined, 503, "unavailable");
      const r = await stack.purchase({ token, key: unique("k"), body: { sku, qty: 1 }, edgeUrl: edge.url });
      assertProblem(r, 503, "unavailable");
      assert.ok(Number(r.headers.get("retry-after")) >= 1);
      assert.equal(await stack.originPurchaseCalls(), calls);
    } finally {
      await edge.stop();
    }
  });
});

/** Joins `n` new shoppers one after another; [{ user, token, answer }]. */
async function joinMany(sku, n, prefix) {
  const members = [];
  for (let i = 0; i < n; i += 1) {
    const user = unique(prefix);
    const token = tokenFor(user);
    members.push({ user, token, answer: assertAnswer(await queue(sku, { token, join: true }), `join ${i}`) });
  }
  return members;
}

/** Polls every member once (with its receipt), keeping the latest answers. */
async function pollAll(sku, members) {
  for (const m of members) {
    m.answer = assertAnswer(await queue(sku, { token: m.token, receipt: m.answer.receipt }), `poll ${m.user}`);
  }
  return members;
}

/** Polls everyone every 200 ms until `done(members)` holds (at most `ms`). */
async function pollUntil(sku, members, done, ms, what) {
  const started = Date.now();
  for (;;) {
    await pollAll(sku, members);
    if (done(members)) return Date.now() - started;
    assert.ok(Date.now() - started < ms, `${what} not within ${ms} ms: ${JSON.stringify(members.map((m) => m.answer.phase))}`);
    await sleep(200);
  }
}

const admittedCount = (members) => members.filter((m) => m.answer.admitted).length;

describe("the room knows the stock (issue 36)", () => {
  test("the sell-out reaches a shopper in line within 3 s; a restock resumes admission in order", async () => {
    // 3 units, overbook 1.0: three passes, then the fourth waits however fast the rate.
    const room = { ...FAST, overbook: 1 };
    const { sku, view } = await sale({ waiting_room: room }, 3);
    assert.deepEqual(view.waiting_room, room);
    const members = await joinMany(sku, 6, "stock");
    await pollUntil(sku, members, (ms) => admittedCount(ms) === 3, 15_000, "three admitted");
    await sleep(2_500);
    await pollAll(sku, members);
    assert.deepEqual(members.map((m) => m.answer.admitted), [true, true, true, false, false, false], "the first three, and no more");
    const next = members[3].answer;
    assert.equal(next.phase, "waiting", JSON.stringify(next));
    assert.equal(next.likely_sold_out, true, "beyond what 3 units × 1.0 can admit");
    assert.equal(next.may_return, undefined);
    assert.ok(next.retry_after_secs <= 1, `the stock decides: poll every second (${next.retry_after_secs})`);

    // The three buy; the last unit's 201 starts the clock.
    const calls = await stack.originPurchaseCalls();
    for (const m of members.slice(0, 3)) {
      const r = await buy(sku, m.token, m.answer.pass);
      assert.equal(r.status, 201, r.text);
    }
    const soldAt = Date.now();
    const waiting = members.slice(3);
    await pollUntil(sku, waiting, (ms) => ms.every((m) => m.answer.phase === "sold_out"), 3_000, "sold_out seen");
    const seenMs = Date.now() - soldAt;
    for (const m of waiting) {
      assert.equal(m.answer.may_return, false, "no holds: nothing can come back");
      assert.equal(m.answer.admitted, false);
      assert.equal(m.answer.pass, undefined);
      assert.equal(m.answer.likely_sold_out, true);
    }
    assert.deepEqual(waiting.map((m) => m.answer.position), [1, 2, 3], "places kept for a resume");
    // Nobody is admitted while sold out; a pass-less purchase is refused at the edge.
    await sleep(1_500);
    await pollAll(sku, waiting);
    assert.equal(admittedCount(waiting), 0);
    assertProblem(await buy(sku, waiting[0].token), 403, "not_admitted");
    assert.equal(await stack.originPurchaseCalls(), calls + 3);

    // A restock of 2: the next two in line, in their order, and not the third.
    await put(sku, { name: "Shoe", price_cents: 1999, stock: 2, max_per_user: 5 });
    await pollUntil(sku, waiting, (ms) => admittedCount(ms) === 2, 10_000, "resume");
    await sleep(1_500);
    await pollAll(sku, waiting);
    assert.deepEqual(waiting.map((m) => m.answer.admitted), [true, true, false], `in order: ${JSON.stringify(waiting.map((m) => m.answer))}`);
    assert.equal(waiting[2].answer.phase, "waiting");
    assert.equal(waiting[2].answer.position, 1);
    const r = await buy(sku, waiting[0].token, waiting[0].answer.pass);
    assert.equal(r.status, 201, r.text);
    console.log(`sold_out seen ${seenMs} ms after the last unit's 201`);
  });

  test("sold out with a hold outstanding says may_return; the cancelled hold's unit goes to the next in line", async () => {
    const room = { ...FAST, overbook: 1 };
    const { sku } = await sale({ waiting_room: room, hold_secs: 600 }, 1);
    const members = await joinMany(sku, 2, "hold");
    await pollUntil(sku, members, (ms) => ms[0].answer.admitted, 15_000, "the first admitted");
    const held = await buy(sku, members[0].token, members[0].answer.pass);
    assert.equal(held.status, 201, held.text);
    assert.equal(held.json.status, "held", held.text);
    const [second] = [members[1]];
    await pollUntil(sku, [second], ([m]) => m.answer.phase === "sold_out", 3_000, "sold_out");
    assert.equal(second.answer.may_return, true, JSON.stringify(second.answer));
    assert.ok(second.answer.retry_after_secs <= 2, JSON.stringify(second.answer));
    // The hold is cancelled: its unit comes back, and the shopper in line is admitted.
    const cancelled = await stack.order(held.json.order_id, { token: members[0].token, cancel: true });
    assert.equal(cancelled.status, 200, cancelled.text);
    await pollUntil(sku, [second], ([m]) => m.answer.admitted, 10_000, "admitted after the return");
    const bought = await buy(sku, second.token, second.answer.pass);
    assert.equal(bought.status, 201, bought.text);
    // Sold out again, now with nothing held elsewhere but this hold: a later joiner is told so.
    const [late] = await joinMany(sku, 1, "late");
    await pollUntil(sku, [late], ([m]) => m.answer.phase === "sold_out", 3_000, "sold_out for a late joiner");
    assert.equal(late.answer.may_return, true, "the new hold may still expire");
  });

  test("overbook at its bound: passes outstanding stop at remaining × overbook (3 and 10 for one unit)", async () => {
    const room = { ...FAST, overbook: 3 };
    const { sku } = await sale({ waiting_room: room }, 1);
    const members = await joinMany(sku, 12, "ob");
    await pollUntil(sku, members, (ms) => admittedCount(ms) === 3, 15_000, "three admitted");
    await sleep(2_500);
    await pollAll(sku, members);
    assert.equal(admittedCount(members), 3, "1 unit × 3.0");
    assert.deepEqual(members.slice(0, 3).map((m) => m.answer.admitted), [true, true, true]);
    assert.equal(members[3].answer.position, 1);
    // The overbook raised to its maximum: 10 passes for the one unit, in order.
    await put(sku, { waiting_room: { ...FAST, overbook: 10 } });
    await pollUntil(sku, members, (ms) => admittedCount(ms) === 10, 15_000, "ten admitted");
    await sleep(2_500);
    await pollAll(sku, members);
    assert.deepEqual(members.map((m) => m.answer.admitted), [...Array(10).fill(true), false, false]);
    assert.equal(members[10].answer.likely_sold_out, true);
    // One buys: the unit is gone, everyone left in line is told.
    const r = await buy(sku, members[0].token, members[0].answer.pass);
    assert.equal(r.status, 201, r.text);
    await pollUntil(sku, members.slice(10), (ms) => ms.every((m) => m.answer.phase === "sold_out"), 3_000, "sold_out");
    // A pass given before the sell-out answers 409 sold_out from the edge's knowledge.
    const calls = await stack.originPurchaseCalls();
    const late = await buy(sku, members[1].token, members[1].answer.pass);
    assertProblem(late, 409, "sold_out");
    assert.equal(await stack.originPurchaseCalls(), calls, "answered at the edge");
  });
});

describe("the place in line tells the truth (issue 36)", () => {
  test("positions across shards in one snapshot are exact: each joiner exactly one behind the one before", async () => {
    // One admission a minute: nobody is admitted while the test reads the line.
    const { sku } = await sale({ waiting_room: { admit_per_minute: 1, pass_secs: 60 } }, 1000);
    const members = await joinMany(sku, 24, "snap");
    const shards = new Set(members.map((m) => m.answer.receipt.split(".")[2]));
    assert.ok(shards.size >= 8, `spread over the shards: ${[...shards]}`);
    await sleep(2_500); // the settle: joined more than a second before a tick
    await pollAll(sku, members);
    const positions = members.map((m) => m.answer.position);
    assert.deepEqual(positions, members.map((_, i) => i + 1), `exact, in join order: ${positions}`);
    // The receipts now carry the place (r2.<kid>.<shard>.<rank>.<join_ms>.<pre>.<admitted_ms>.<place>.<mac>):
    // polled with them, the same answers, and no shard object is asked — the shards' request
    // counters move by the coordinator's ticks (32 pulls a second) and the stats calls only.
    for (const m of members) assert.match(m.answer.receipt, /^r2\.[^.]+\.\d+\.\d+\.\d+\.0\.-\.\d+\./, m.answer.receipt);
    const shardRequests = async () => {
      const stats = await stack.get(`/v1/queue/${sku}/stats`, { authorization: `Bearer ${ADMIN_TOKEN}` });
      return stats.json.objects.filter((o) => o.name.startsWith("shard")).reduce((n, o) => n + o.requests, 0);
    };
    const before = await shardRequests();
    const t0 = Date.now();
    for (let round = 0; round < 5; round += 1) {
      await pollAll(sku, members);
      assert.deepEqual(members.map((m) => m.answer.position), positions);
    }
    const seconds = Math.ceil((Date.now() - t0) / 1000) + 1;
    const asked = (await shardRequests()) - before;
    assert.ok(asked <= 32 * (seconds + 1), `${asked} shard requests in ${seconds} s for ${5 * members.length} polls`);
  });

  test("a shopper's position over successive polls never rises and reaches the front", async () => {
    const room = { admit_per_minute: 240, pass_secs: 60 };
    const { sku } = await sale({ waiting_room: room }, 1000);
    const members = await joinMany(sku, 40, "mono");
    await sleep(2_200);
    const me = members[35];
    const seen = [];
    const started = Date.now();
    let a = assertAnswer(await queue(sku, { token: me.token, receipt: me.answer.receipt }), "poll");
    while (!a.admitted) {
      assert.ok(Date.now() - started < 20_000, `not admitted: ${JSON.stringify(a)}`);
      seen.push(a.position);
      // Everyone ahead is still waiting or admitted: the exact place is those not admitted yet.
      await sleep(250);
      a = assertAnswer(await queue(sku, { token: me.token, receipt: a.receipt }), "poll");
    }
    assert.ok(seen.length >= 10, `${seen}`);
    for (let i = 1; i < seen.length; i += 1) assert.ok(seen[i] <= seen[i - 1], `rose: ${seen}`);
    assert.ok(seen[0] <= 36 && seen[0] >= 10, `${seen}`);
    assert.ok(seen.at(-1) <= 8, `reached the front: ${seen}`);
  });
});
