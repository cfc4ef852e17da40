// The edge (workerd under wrangler dev) SIGKILLed mid-sale and started again on the same
// persisted state: what its Durable Objects had persisted still holds — completed keys replay
// without an origin call, a spent rate limit stays spent, keys that were in flight at the kill are
// blocked until their in-flight timeout and then decided exactly once (the origin's own
// idempotency replays what it committed). Nothing is oversold and every 201 has its one order.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";

import { Stack, tokenFor, unique } from "./harness.mjs";

const stack = new Stack();

before(async () => {
  await stack.start();
});

after(async () => {
  await stack.stop();
});

function sql(query) {
  return execFileSync("psql", ["-h", "127.0.0.1", "-U", "postgres", "-d", stack.db, "-tAc", query], {
    encoding: "utf8",
  }).trim();
}

function kill9(edge) {
  try {
    process.kill(-edge.child.pid, "SIGKILL");
  } catch {
    // already gone
  }
}

test("an edge restarted mid-sale keeps idempotency and rate limits it had persisted", async () => {
  // Replays and retries count against the rate limit (README: the limiter runs first), so the
  // quota leaves room for them; the `limited` shopper spends all of it.
  const QUOTA = 30;
  const IN_FLIGHT_SECS = 5;
  const overrides = {
    ORIGIN_URL: stack.originUrl,
    RATE_LIMIT_QUOTA: String(QUOTA),
    RATE_LIMIT_WINDOW_SECS: "3600",
    IDEMPOTENCY_IN_FLIGHT_TIMEOUT_SECS: String(IN_FLIGHT_SECS),
  };
  const sku = unique("SKU");
  await stack.putSku(sku, { stock: 60, maxPerUser: 3 });
  let edge = await stack.startEdge(overrides, "restarted");
  const buy = (user, key, url = edge.url) =>
    stack.purchase({ token: tokenFor(user), key, body: { sku, qty: 1 }, edgeUrl: url }).catch((e) => ({ error: e }));

  // Before the restart: 12 shoppers × 2 completed purchases, and one shopper who spends the
  // whole rate limit.
  const users = Array.from({ length: 12 }, () => unique("user"));
  const completed = users.flatMap((user) => [0, 1].map((i) => ({ user, key: unique(`k${i}`) })));
  const first = await Promise.all(completed.map(({ user, key }) => buy(user, key)));
  for (const [i, r] of first.entries()) completed[i].answer = r;
  const created = first.filter((r) => r.status === 201).length;
  assert.equal(created, 24, first.map((r) => `${r.status} ${r.text}`).join("\n"));
  const limited = unique("limited");
  for (let i = 0; i < QUOTA; i++) {
    const r = await buy(limited, unique("rl"));
    assert.ok([201, 409].includes(r.status), `${r.status} ${r.text}`);
  }

  // Mid-sale: a third purchase per shopper is on its way when the edge is SIGKILLed.
  const third = users.map((user) => ({ user, key: unique("k2") }));
  const during = Promise.all(third.map(({ user, key }) => buy(user, key)));
  await sleep(30);
  kill9(edge);
  const cut = await during;
  const answeredBeforeKill = cut.filter((r) => r.status === 201).length;

  // Same persisted state, new process (and port).
  edge = await stack.startEdge(overrides, "restarted");
  const callsBefore = await stack.originPurchaseCalls();

  // Completed keys replay byte for byte, from the edge alone.
  const replays = await Promise.all(completed.map(({ user, key }) => buy(user, key)));
  for (const [i, r] of replays.entries()) {
    assert.equal(r.status, completed[i].answer.status, r.text);
    assert.equal(r.text, completed[i].answer.text);
    assert.equal(r.headers.get("idempotent-replayed"), "true");
  }
  assert.equal(await stack.originPurchaseCalls(), callsBefore, "replays after the restart reached the origin");

  // The spent rate limit is still spent.
  const over = await buy(limited, unique("rl"));
  assert.equal(over.status, 429, over.text);
  assert.ok(Number(over.headers.get("retry-after")) > 0);

  // Keys cut by the kill: each is decided exactly once — retried until they get a final answer
  // (409 idempotency_in_flight until the in-flight record expires).
  const finals = [];
  const deadline = Date.now() + (IN_FLIGHT_SECS + 20) * 1000;
  for (const [i, { user, key }] of third.entries()) {
    let r;
    for (;;) {
      r = await buy(user, key);
      const inFlight = r.status === 409 && r.json?.code === "idempotency_in_flight";
      if (!inFlight && r.status !== 503 && !r.error) break;
      assert.ok(Date.now() < deadline, `key never settled: ${r.status} ${r.text}`);
      await sleep(500);
    }
    if (cut[i].status === 201) assert.equal(r.text, cut[i].text, "an answered key changed its answer");
    finals.push(r);
  }
  for (const r of finals) assert.ok([201, 409].includes(r.status), `${r.status} ${r.text}`);

  // The books: every 201 has exactly one order, nothing oversold, nobody above the cap.
  const orderIds = [...first, ...finals]
    .filter((r) => r.status === 201)
    .map((r) => r.json.order_id);
  assert.equal(new Set(orderIds).size, orderIds.length);
  const [orders, distinct] = sql(`SELECT count(*), count(DISTINCT order_id) FROM orders WHERE sku = '${sku}'`).split("|");
  const limitedOrders = Number(sql(`SELECT count(*) FROM orders WHERE sku = '${sku}' AND user_id = '${limited}'`));
  assert.equal(Number(orders), Number(distinct));
  assert.equal(Number(orders), orderIds.length + limitedOrders, "an order nobody was told about, or a 201 without order");
  for (const id of orderIds) assert.equal(sql(`SELECT count(*) FROM orders WHERE order_id = '${id}'`), "1");
  const view = await stack.originSku(sku);
  assert.equal(60 - view.body.stock, Number(orders), "stock + sold == initial");
  assert.equal(sql(`SELECT count(*) FROM (SELECT user_id FROM orders WHERE sku = '${sku}' GROUP BY user_id HAVING SUM(qty) > 3) t`), "0");
  console.log(`edge restart: ${answeredBeforeKill}/${third.length} cut purchases answered before the kill; ${orders} orders`);
  await edge.stop();
});
