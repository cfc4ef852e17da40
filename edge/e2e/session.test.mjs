// The shopper session cookie and its CSRF defence, over HTTP: the built worker in workerd in
// front of the real origin. A cookie request without the defence is 403 csrf_rejected and never
// reaches the origin (counted on the origin's /metrics).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Stack, assertProblem, response, tokenFor, unique } from "./harness.mjs";

let stack;
before(async () => {
  stack = new Stack();
  await stack.start();
});
after(async () => stack?.stop());

const cookie = (token) => ({ cookie: `theme=dark; flashgate_session=${token}` });

async function post(path, headers, body) {
  return response(await fetch(`${stack.edgeUrl}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body }));
}

test("the session cookie with X-Flashgate-CSRF buys, and reads and cancels the shopper's order", async () => {
  const sku = await stack.freshSku({ stock: 5 });
  const token = tokenFor(unique("cookie"));
  const bought = await post(
    "/v1/purchases",
    { ...cookie(token), "x-flashgate-csrf": "1", origin: stack.edgeUrl, "sec-fetch-site": "same-origin", "idempotency-key": unique("k") },
    JSON.stringify({ sku, qty: 1 }),
  );
  assert.equal(bought.status, 201, bought.text);
  const id = bought.json.order_id;
  const view = await stack.get(`/v1/orders/${id}`, { ...cookie(token), "x-flashgate-csrf": "1" });
  assert.equal(view.status, 200, view.text);
  assert.equal(view.json.order_id, id);
  const cancelled = await post(`/v1/orders/${id}/cancel`, { ...cookie(token), "x-flashgate-csrf": "1" }, "");
  assert.equal(cancelled.status, 200, cancelled.text);
  assert.equal(cancelled.json.status, "cancelled");
});

test("a cookie request without the CSRF defence is 403 csrf_rejected and never forwarded", async () => {
  const sku = await stack.freshSku({ stock: 5 });
  const token = tokenFor(unique("csrf"));
  const before = await stack.originPurchaseCalls();
  const body = JSON.stringify({ sku, qty: 1 });
  for (const [what, extra] of [
    ["no header", {}],
    ["wrong header value", { "x-flashgate-csrf": "0" }],
    ["another Origin", { "x-flashgate-csrf": "1", origin: "https://evil.example" }],
    ["cross-site fetch", { "x-flashgate-csrf": "1", "sec-fetch-site": "cross-site" }],
  ]) {
    const r = await post("/v1/purchases", { ...cookie(token), "idempotency-key": unique("k"), ...extra }, body);
    assertProblem(r, 403, "csrf_rejected", what);
  }
  // The order routes too (the id is well formed: the refusal comes first).
  const id = "0192f1c2-7b3a-7c4d-9e8f-0123456789ab";
  assertProblem(await stack.get(`/v1/orders/${id}`, cookie(token)), 403, "csrf_rejected", "order view");
  assertProblem(await post(`/v1/orders/${id}/cancel`, cookie(token), ""), 403, "csrf_rejected", "order cancel");
  assert.equal(await stack.originPurchaseCalls(), before, "no refused request reached the origin");
  assert.equal((await stack.originSku(sku)).body.stock, 5);
});

test("Authorization: Bearer wins over the cookie and needs no CSRF header; a bad cookie token is 401", async () => {
  const sku = await stack.freshSku({ stock: 5 });
  const user = unique("bearer");
  const r = await stack.purchase({ token: tokenFor(user), key: unique("k"), body: { sku, qty: 1 }, headers: cookie("not-a-token") });
  assert.equal(r.status, 201, r.text);
  assert.equal(r.json.user, user);
  const forged = await post("/v1/purchases", { ...cookie("a.b.c"), "x-flashgate-csrf": "1", "idempotency-key": unique("k") }, JSON.stringify({ sku, qty: 1 }));
  assertProblem(forged, 401, "unauthenticated", "forged cookie token");
});
