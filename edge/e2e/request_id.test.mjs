// Flashgate-Request-Id from the shopper, through the edge, into the origin's logs, and back.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

import { Stack, tokenFor, unique } from "./harness.mjs";

const stack = new Stack();

before(async () => {
  await stack.start();
});

after(async () => {
  await stack.stop();
});

/** The origin's JSON log events whose request span carries `id`. */
async function originEventsFor(id) {
  for (let i = 0; i < 20; i++) {
    const events = readFileSync(stack.originLog, "utf8")
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l))
      .filter((e) => (e.spans ?? []).some((s) => s.request_id === id));
    if (events.length > 0) return events;
    await sleep(100);
  }
  return [];
}

test("the request id is kept or made at the edge, echoed, and logged by the origin", async () => {
  const sku = unique("SKU");
  await stack.putSku(sku, { stock: 5 });
  const user = unique("user");

  // A caller's well-formed id is kept end to end.
  const given = unique("shop-trace");
  const r = await stack.purchase({ token: tokenFor(user), key: unique("k"), body: { sku, qty: 1 }, headers: { "flashgate-request-id": given } });
  assert.equal(r.status, 201, r.text);
  assert.equal(r.headers.get("flashgate-request-id"), given);
  const events = await originEventsFor(given);
  const decided = events.find((e) => e.message === "purchase decided");
  assert.ok(decided, `no origin event under ${given}:\n${stack.logs()}`);
  assert.equal(decided.outcome, "created");
  assert.ok(decided.batch_id, JSON.stringify(decided));
  // The shopper appears in the origin's logs only as a pseudonym.
  assert.ok(!readFileSync(stack.originLog, "utf8").includes(user), "a user id in the origin's logs");

  // A missing or malformed id is replaced by one the edge makes, and that one reaches the origin.
  for (const headers of [{}, { "flashgate-request-id": "bad id with spaces" }]) {
    const r2 = await stack.purchase({ token: tokenFor(user), key: unique("k"), body: { sku, qty: 1 }, headers });
    assert.equal(r2.status, 201, r2.text);
    const made = r2.headers.get("flashgate-request-id");
    assert.match(made ?? "", /^[A-Za-z0-9._:-]{1,128}$/);
    assert.notEqual(made, "bad id with spaces");
    assert.ok((await originEventsFor(made)).length > 0, `origin never saw ${made}`);
  }

  // Answers the edge gives alone carry one too.
  const h = await stack.get("/healthz");
  assert.match(h.headers.get("flashgate-request-id") ?? "", /^[A-Za-z0-9._:-]{1,128}$/);
});
