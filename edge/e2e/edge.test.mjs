// End-to-end tests of the edge: the BUILT worker in workerd (wrangler dev) in front of the REAL
// origin (Postgres + Redis). Run with scripts/test-edge.sh (builds everything first).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import {
  ADMIN_TOKEN,
  EDGE_KID,
  EDGE_SHARED_SECRET,
  RATE_QUOTA,
  SECRETS,
  SESSION_KID,
  SESSION_SECRET,
  Stack,
  assertProblem as assertProblemCode,
  blackHole,
  jwt,
  now,
  tokenFor,
  unique,
} from "./harness.mjs";

const stack = new Stack();

before(async () => {
  await stack.start();
});

after(async () => {
  await stack.stop();
});

/** Asserts a problem+json answer with `status` and `code`, and its other RFC 9457 members. */
function assertProblem(r, status, code, context = "") {
  assertProblemCode(r, status, code, context);
  const where = `${context} → ${r.status} ${r.text}`;
  assert.equal(r.json?.status, status, where);
  for (const member of ["type", "title", "detail"]) assert.ok(r.json?.[member], `${member} missing: ${where}`);
}

/** A fresh SKU on the origin. */
const sku = (opts) => stack.freshSku(opts);

const user = () => unique("user");
const key = () => unique("key");

describe("routing", () => {
  test("healthz, unknown routes and wrong methods", async () => {
    const before = Date.now();
    const h = await stack.get("/healthz");
    assert.equal(h.status, 200);
    // The edge's Date header (http_date: httpdate in the wasm build), an IMF-fixdate on the
    // edge's clock: the sale page's countdown runs on it.
    const date = h.headers.get("date");
    assert.match(date ?? "", /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d GMT$/);
    assert.ok(Math.abs(Date.parse(date) - before) < 5000, `Date ${date} is not now`);
    assertProblem(await stack.get("/nope"), 404, "not_found");
    const wrong = await stack.get("/v1/purchases");
    assertProblem(wrong, 405, "method_not_allowed");
    assert.equal(wrong.headers.get("allow"), "POST");
  });
});

describe("shopper authentication (401 unauthenticated)", () => {
  test("the JWT matrix never reaches the origin", async () => {
    const s = await sku({ stock: 100 });
    const body = { sku: s, qty: 1 };
    const good = { sub: "mallory", exp: now() + 600 };
    const noneAlg = `${Buffer.from('{"alg":"none","typ":"JWT"}').toString("base64url")}.${Buffer.from(JSON.stringify(good)).toString("base64url")}.`;
    const cases = {
      "none alg": noneAlg,
      "HS512 header": jwt(good, { header: { alg: "HS512", typ: "JWT" } }),
      "wrong key": jwt(good, { secret: "not-the-session-secret" }),
      expired: jwt({ sub: "mallory", exp: now() - 5 }),
      "not yet valid": jwt({ sub: "mallory", exp: now() + 600, nbf: now() + 300 }),
      "missing exp": jwt({ sub: "mallory" }),
      "missing sub": jwt({ exp: now() + 600 }),
      "invalid sub": jwt({ sub: "mal lory", exp: now() + 600 }),
      garbage: "garbage",
      "two segments": "abc.def",
      "tampered claims": (() => {
        const [h, , sig] = jwt(good).split(".");
        return `${h}.${Buffer.from(JSON.stringify({ ...good, sub: "admin" })).toString("base64url")}.${sig}`;
      })(),
    };
    const before = await stack.originPurchaseCalls();
    for (const [name, token] of Object.entries(cases)) {
      const r = await stack.purchase({ token, key: key(), body });
      assertProblem(r, 401, "unauthenticated", name);
    }
    assertProblem(await stack.purchase({ key: key(), body }), 401, "unauthenticated", "no Authorization");
    assertProblem(
      await stack.purchase({ key: key(), body, headers: { authorization: `Basic ${tokenFor("x")}` } }),
      401,
      "unauthenticated",
      "wrong scheme",
    );
    assert.equal(await stack.originPurchaseCalls(), before, "no rejected token may reach the origin");
  });
});

describe("request validation", () => {
  test("400 missing / invalid key, 400 invalid body, 413 too large", async () => {
    const token = tokenFor(user());
    const s = await sku({ stock: 10 });
    const before = await stack.originPurchaseCalls();
    assertProblem(await stack.purchase({ token, body: { sku: s, qty: 1 } }), 400, "missing_idempotency_key");
    assertProblem(await stack.purchase({ token, key: '"unterminated', body: { sku: s, qty: 1 } }), 400, "invalid_request");
    assertProblem(await stack.purchase({ token, key: "k".repeat(256), body: { sku: s, qty: 1 } }), 400, "invalid_request");
    for (const body of ["nope", "[]", { sku: s }, { sku: s, qty: 0 }, { sku: s, qty: 101 }, { sku: s, qty: 1.5 }, { sku: s, qty: "1" }, { sku: "a b", qty: 1 }]) {
      assertProblem(await stack.purchase({ token, key: key(), body }), 400, "invalid_request", JSON.stringify(body));
    }
    const big = JSON.stringify({ sku: s, qty: 1, pad: "x".repeat(17 * 1024) });
    assertProblem(await stack.purchase({ token, key: key(), body: big }), 413, "payload_too_large");
    assert.equal(await stack.originPurchaseCalls(), before);
  });
});

describe("purchases and idempotency at the edge", () => {
  test("201, replay with Idempotent-Replayed, 422 on a different body, both key forms", async () => {
    const s = await sku({ stock: 10 });
    const token = tokenFor(user());
    const k = key();
    const before = await stack.originPurchaseCalls();

    const first = await stack.purchase({ token, key: k, body: { sku: s, qty: 2 } });
    assert.equal(first.status, 201, first.text);
    assert.match(first.headers.get("content-type"), /^application\/json/);
    assert.equal(first.json.sku, s);
    assert.equal(first.json.qty, 2);
    assert.equal(first.json.remaining, 8);
    assert.ok(first.json.order_id);
    assert.equal(first.headers.get("idempotent-replayed"), null);
    assert.equal(first.headers.get("ratelimit-policy"), `"purchase";q=${RATE_QUOTA};w=3600`);
    assert.match(first.headers.get("ratelimit"), /^"purchase";r=\d+;t=\d+$/);

    // Same parsed request (other whitespace/order, sf-string form of the key): a replay.
    const again = await stack.purchase({ token, key: `"${k}"`, body: ` { "qty" : 2, "sku" : "${s}" } ` });
    assert.equal(again.status, 201);
    assert.equal(again.headers.get("idempotent-replayed"), "true");
    assert.equal(again.text, first.text, "a replay is byte-for-byte the same body");

    assertProblem(await stack.purchase({ token, key: k, body: { sku: s, qty: 3 } }), 422, "idempotency_key_reused");
    assert.equal(await stack.originPurchaseCalls(), before + 1, "replays and 422s never reach the origin");

    // Another user's identical key is a different record.
    const other = await stack.purchase({ token: tokenFor(user()), key: k, body: { sku: s, qty: 2 } });
    assert.equal(other.status, 201);
    assert.notEqual(other.json.order_id, first.json.order_id);
  });

  test("404 unknown_sku is the origin's answer and is stored", async () => {
    const token = tokenFor(user());
    const k = key();
    const missing = unique("NOSUCH");
    const r = await stack.purchase({ token, key: k, body: { sku: missing, qty: 1 } });
    assertProblem(r, 404, "unknown_sku");
    const before = await stack.originPurchaseCalls();
    const replay = await stack.purchase({ token, key: k, body: { sku: missing, qty: 1 } });
    assertProblem(replay, 404, "unknown_sku");
    assert.equal(replay.headers.get("idempotent-replayed"), "true");
    assert.equal(await stack.originPurchaseCalls(), before);
  });

  test("50 parallel requests with one key make exactly one origin purchase", async () => {
    const s = await sku({ stock: 1000 });
    const token = tokenFor(user());
    const k = key();
    const before = await stack.originPurchaseCalls();
    const results = await Promise.all(Array.from({ length: 50 }, () => stack.purchase({ token, key: k, body: { sku: s, qty: 1 } })));
    const fresh = results.filter((r) => r.status === 201 && r.headers.get("idempotent-replayed") !== "true");
    const replays = results.filter((r) => r.status === 201 && r.headers.get("idempotent-replayed") === "true");
    const inFlight = results.filter((r) => r.status === 409 && r.json?.code === "idempotency_in_flight");
    assert.equal(fresh.length, 1, results.map((r) => `${r.status} ${r.text}`).join("\n"));
    assert.equal(fresh.length + replays.length + inFlight.length, 50, "only 201, replays and 409 in flight");
    for (const r of replays) assert.equal(r.text, fresh[0].text);
    assert.equal(await stack.originPurchaseCalls(), before + 1, "exactly one origin call");
    assert.equal((await stack.originSku(s)).body.stock, 999);
  });
});

describe("rate limit (429, per user, strongly consistent)", () => {
  test("100 parallel attempts from one user: exactly the quota is admitted", async (t) => {
    const s = await sku({ stock: 100_000, maxPerUser: 100_000 });
    const u = user();
    const token = tokenFor(u);
    const started = Date.now();
    const results = await Promise.all(
      Array.from({ length: 100 }, () => stack.purchase({ token, key: key(), body: { sku: s, qty: 1 } })),
    );
    const elapsedSecs = (Date.now() - started) / 1000;
    const limited = results.filter((r) => r.status === 429);
    // Admitted = passed the limiter: every answer from behind the user's gate carries `RateLimit`.
    // (A 503 from the gate itself — a Durable Object overloaded under this burst — was neither.)
    const admitted = results.filter((r) => r.status !== 429 && r.headers.get("ratelimit") !== null);
    const tally = {};
    for (const r of results) {
      const k = `${r.status} ${r.json?.code ?? ""}${r.status === 503 ? ` (${r.json?.detail})` : ""}`;
      tally[k] = (tally[k] ?? 0) + 1;
    }
    const seen = `${JSON.stringify(tally)} in ${elapsedSecs}s`;
    t.diagnostic(seen);
    for (const r of results) assert.ok([201, 429, 503].includes(r.status), `${r.status} ${r.text}: ${seen}`);
    assert.ok(admitted.length <= RATE_QUOTA, `admitted ${admitted.length} > quota ${RATE_QUOTA}: ${seen}`);
    // One more unit frees every window/quota = 72 s; the burst takes far less.
    const gateUnavailable = results.filter((r) => r.status === 503 && r.headers.get("ratelimit") === null);
    if (elapsedSecs < 3600 / RATE_QUOTA && gateUnavailable.length === 0) {
      assert.equal(admitted.length, RATE_QUOTA, seen);
      assert.equal(limited.length, 100 - RATE_QUOTA, seen);
    }
    // Admitted attempts were forwarded: 201, or 503 if the loaded origin missed the deadline.
    for (const r of admitted) assert.ok(r.status === 201 || r.json?.code === "unavailable", `${r.status} ${r.text}`);
    assert.ok(admitted.filter((r) => r.status === 201).length > 0, seen);
    for (const r of limited) {
      assertProblem(r, 429, "rate_limited");
      assert.equal(r.headers.get("ratelimit-policy"), `"purchase";q=${RATE_QUOTA};w=3600`);
      const m = r.headers.get("ratelimit").match(/^"purchase";r=0;t=(\d+)$/);
      assert.ok(m, r.headers.get("ratelimit"));
      const retryAfter = Number(r.headers.get("retry-after"));
      assert.ok(retryAfter >= 1 && retryAfter >= Number(m[1]), `Retry-After ${retryAfter} >= t ${m[1]}`);
    }
    // Another user is not affected.
    const other = await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 1 } });
    assert.equal(other.status, 201);
  });
});

describe("shields: answered at the edge without an origin call", () => {
  test("after sell-out, purchase attempts reach the origin 0 times, until a warmup shows stock", async () => {
    const s = await sku({ stock: 3, maxPerUser: 5 });
    for (let i = 0; i < 3; i += 1) {
      const r = await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 1 } });
      assert.equal(r.status, 201, r.text);
    }
    // The origin said remaining: 0 — the edge knows. Nobody else reaches the origin.
    const before = await stack.originPurchaseCalls();
    for (let i = 0; i < 10; i += 1) {
      const r = await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 1 } });
      assertProblem(r, 409, "sold_out", `attempt ${i}`);
    }
    const parallel = await Promise.all(
      Array.from({ length: 20 }, () => stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 1 } })),
    );
    for (const r of parallel) assertProblem(r, 409, "sold_out");
    assert.equal(await stack.originPurchaseCalls(), before, "sold out: 0 origin calls");

    // A shield answer is the edge's guess, not the origin's decision: it is not stored with the
    // key, so the same key retried after the restock (and the warmup) reaches the origin.
    const token = tokenFor(user());
    const k = key();
    assertProblem(await stack.purchase({ token, key: k, body: { sku: s, qty: 1 } }), 409, "sold_out");

    await stack.putSku(s, { stock: 2, maxPerUser: 5 });
    const stillShielded = await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 1 } });
    assertProblem(stillShielded, 409, "sold_out", "before the warmup");
    const w = await stack.warmup([s]);
    assert.equal(w.status, 200, w.text);
    const afterWarmup = await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 1 } });
    assert.equal(afterWarmup.status, 201, afterWarmup.text);
    const retried = await stack.purchase({ token, key: k, body: { sku: s, qty: 1 } });
    assert.equal(retried.status, 201, `the shielded key, retried after the restock: ${retried.text}`);
    assert.equal(retried.headers.get("idempotent-replayed"), null);
  });

  test("an origin sold_out for qty n shields requests for n or more", async () => {
    const s = await sku({ stock: 2, maxPerUser: 10 });
    const r = await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 3 } });
    assertProblem(r, 409, "sold_out", "origin's answer");
    const before = await stack.originPurchaseCalls();
    assertProblem(await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 5 } }), 409, "sold_out");
    assert.equal(await stack.originPurchaseCalls(), before, "shielded");
    const ok = await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 2 } });
    assert.equal(ok.status, 201, ok.text);
  });

  test("a user known to have reached max_per_user gets 409 purchase_limit at the edge", async () => {
    const s = await sku({ stock: 100, maxPerUser: 2 });
    const w = await stack.warmup([s]);
    assert.equal(w.status, 200, w.text);
    const token = tokenFor(user());
    const first = await stack.purchase({ token, key: key(), body: { sku: s, qty: 2 } });
    assert.equal(first.status, 201, first.text);
    const before = await stack.originPurchaseCalls();
    const r = await stack.purchase({ token, key: key(), body: { sku: s, qty: 1 } });
    assertProblem(r, 409, "purchase_limit");
    assert.equal(await stack.originPurchaseCalls(), before, "answered at the edge");
    // Someone else can still buy.
    const other = await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 1 } });
    assert.equal(other.status, 201, other.text);
  });

  test("the origin's purchase_limit is relayed when the edge did not know the cap", async () => {
    const s = await sku({ stock: 100, maxPerUser: 1 });
    const token = tokenFor(user());
    assert.equal((await stack.purchase({ token, key: key(), body: { sku: s, qty: 1 } })).status, 201);
    assertProblem(await stack.purchase({ token, key: key(), body: { sku: s, qty: 1 } }), 409, "purchase_limit");
  });
});

describe("warmup and the SKU view cache", () => {
  test("401 without or with a wrong admin token", async () => {
    const s = await sku({ stock: 1 });
    assertProblem(await stack.warmup([s], null), 401, "unauthorized");
    assertProblem(await stack.warmup([s], `${ADMIN_TOKEN}x`), 401, "unauthorized");
    assertProblem(await stack.warmup([s], tokenFor("alice")), 401, "unauthorized");
  });

  test("warmup then a cached GET", async () => {
    const a = await sku({ stock: 7, maxPerUser: 3, price: 4200, name: "Warm Shoe" });
    const gone = await sku({ stock: 0 });
    const missing = unique("MISSING");
    const w = await stack.warmup([a, gone, missing]);
    assert.equal(w.status, 200, w.text);
    assert.deepEqual(w.json.warmed, [a, gone]);
    assert.deepEqual(w.json.missing, [missing]);
    assert.deepEqual(w.json.sold_out, [gone]);

    const r = await stack.get(`/v1/skus/${a}`);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get("flashgate-cache"), "HIT");
    assert.match(r.headers.get("cache-control"), /max-age=\d+/);
    assert.deepEqual(r.json, { sku: a, name: "Warm Shoe", price_cents: 4200, stock: 7, held: 0, max_per_user: 3, starts_at: null, ends_at: null, paused: false, waiting_room: null, proof_of_work: null, network_limits: null });

    // Warmed as sold out: no origin call for it.
    const before = await stack.originPurchaseCalls();
    assertProblem(await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: gone, qty: 1 } }), 409, "sold_out");
    assert.equal(await stack.originPurchaseCalls(), before);
  });

  test("a miss fetches from the origin and caches; unknown SKUs are 404", async () => {
    const s = await sku({ stock: 5 });
    const miss = await stack.get(`/v1/skus/${s}`);
    assert.equal(miss.status, 200, miss.text);
    assert.equal(miss.headers.get("flashgate-cache"), "MISS");
    const hit = await stack.get(`/v1/skus/${s}`);
    assert.equal(hit.headers.get("flashgate-cache"), "HIT");
    assert.equal(hit.text, miss.text);
    assertProblem(await stack.get(`/v1/skus/${unique("NOSUCH")}`), 404, "unknown_sku");
    assertProblem(await stack.get(`/v1/skus/bad%20sku`), 400, "invalid_request");
  });
});

describe("origin unavailable", () => {
  test("503 with Retry-After, and the same key can be retried once the origin is back", async () => {
    const s = await sku({ stock: 10 });
    const token = tokenFor(user());
    const k = key();
    await stack.stopOrigin();
    try {
      const r = await stack.purchase({ token, key: k, body: { sku: s, qty: 1 } });
      assertProblem(r, 503, "unavailable");
      assert.ok(Number(r.headers.get("retry-after")) >= 1);
      // A second try while still down: released, so 503 again (not 409 in flight).
      assertProblem(await stack.purchase({ token, key: k, body: { sku: s, qty: 1 } }), 503, "unavailable");
      const view = await stack.get(`/v1/skus/${unique("COLD")}`);
      assertProblem(view, 503, "unavailable");
      assert.ok(Number(view.headers.get("retry-after")) >= 1);
      assertProblem(await stack.warmup([s]), 503, "unavailable");
    } finally {
      await stack.startOrigin();
    }
    const retry = await stack.purchase({ token, key: k, body: { sku: s, qty: 1 } });
    assert.equal(retry.status, 201, retry.text);
    assert.equal(retry.headers.get("idempotent-replayed"), null);
  });

  test("a hanging origin is cut off at ORIGIN_TIMEOUT_MS: 503, and the key is released", async () => {
    const hole = await blackHole();
    const edge = await stack.startEdge({ ORIGIN_URL: hole.url, ORIGIN_TIMEOUT_MS: "700" }, "wrangler-slow-origin");
    try {
      const token = tokenFor(user());
      const k = key();
      const body = { sku: unique("SLOW"), qty: 1 };
      const started = Date.now();
      const r = await stack.purchase({ token, key: k, body, edgeUrl: edge.url });
      const took = Date.now() - started;
      assertProblem(r, 503, "unavailable");
      assert.ok(Number(r.headers.get("retry-after")) >= 1);
      assert.ok(took >= 600 && took < 5_000, `answered after ${took} ms`);
      assert.ok(hole.connections() >= 0);
      // Released: the same key is tried again (503 again), not blocked as in flight.
      assertProblem(await stack.purchase({ token, key: k, body, edgeUrl: edge.url }), 503, "unavailable");
    } finally {
      await edge.stop();
      await hole.close();
    }
  });
});

describe("a misconfigured edge", () => {
  test("without its signing secret: alive, not ready, 503 with Retry-After everywhere, nothing forwarded", async () => {
    const s = await sku({ stock: 10 });
    const edge = await stack.startEdge({ EDGE_SHARED_SECRETS: "" }, "wrangler-misconfigured");
    try {
      const before = await stack.originPurchaseCalls();
      assert.equal((await stack.get("/healthz", {}, edge.url)).status, 200, "liveness: the Worker runs");
      const ready = await stack.get("/readyz", {}, edge.url);
      assertProblem(ready, 503, "unavailable", "readyz");
      assert.equal(ready.headers.get("retry-after"), "30");
      assert.doesNotMatch(ready.text, /EDGE_SHARED_SECRET/, "the reason is logged, not sent");
      const buy = await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 1 }, edgeUrl: edge.url });
      assertProblem(buy, 503, "unavailable", "purchase");
      assert.equal(buy.headers.get("retry-after"), "30");
      assertProblem(await stack.get(`/v1/skus/${s}`, {}, edge.url), 503, "unavailable", "sku view");
      assertProblem(await stack.warmup([s], ADMIN_TOKEN, edge.url), 503, "unavailable", "warmup");
      assert.equal(await stack.originPurchaseCalls(), before, "nothing reached the origin");
      assert.equal((await stack.originSku(s)).body.stock, 10);
    } finally {
      await edge.stop();
    }
    // The suite's well-configured edge is ready.
    const ok = await stack.get("/readyz");
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json?.status, "ready");
  });
});

describe("secret rotation", () => {
  // Rotating the edge -> origin signing secret, the session key and the admin token, as the
  // docs/security.md's procedure says: the origin learns the new edge key first (restart with [new, old]),
  // then the edge signs with it (new edge with [new, old]), then the origin forgets the old key.
  test("rotating the edge's signing secret keeps purchases working, and the retired key is refused", async () => {
    const NEW_EDGE = "e2e-edge-shared-secret-NEW-9876543210";
    const NEW_SESSION = "e2e-session-secret-NEW-9876543210";
    const NEW_ADMIN = "e2e-admin-token-NEW-9876543210";
    const s = await sku({ stock: 100 });
    const buy = async (edgeUrl, token, what) => {
      const r = await stack.purchase({ token, key: key(), body: { sku: s, qty: 1 }, edgeUrl });
      assert.equal(r.status, 201, `${what}: ${r.status} ${r.text}`);
      return r;
    };
    const oldEdge = stack.edgeUrl; // signs with e1 = EDGE_SHARED_SECRET
    let newEdge;
    try {
      // 1. Every origin learns the new key and keeps the old one.
      await stack.restartOrigin({
        EDGE_SHARED_SECRETS: `e2:${NEW_EDGE},${EDGE_KID}:${EDGE_SHARED_SECRET}`,
        ADMIN_TOKENS: `${NEW_ADMIN},${ADMIN_TOKEN}`,
      });
      await buy(oldEdge, tokenFor(user()), "old edge, origin [new, old]");
      assert.deepEqual(await stack.originSignatures(), { [`v2/${EDGE_KID}`]: 1 });

      // 2. The edge switches: it signs with e2 and holds the new session key and admin token
      //    first, the old ones still accepted.
      newEdge = await stack.startEdge(
        {
          EDGE_SHARED_SECRETS: `e2:${NEW_EDGE},${EDGE_KID}:${EDGE_SHARED_SECRET}`,
          SESSION_SECRETS: `s2:${NEW_SESSION},${SECRETS.SESSION_SECRETS}`,
          ADMIN_TOKENS: `${NEW_ADMIN},${ADMIN_TOKEN}`,
        },
        "wrangler-rotated",
      );
      const claims = () => ({ sub: user(), exp: now() + 600 });
      await buy(newEdge.url, jwt(claims(), { secret: NEW_SESSION, kid: "s2" }), "new session key (kid s2)");
      await buy(newEdge.url, jwt(claims(), { kid: SESSION_KID }), "old session key (kid s1)");
      await buy(newEdge.url, tokenFor(user()), "old session token without kid");
      for (const [what, token] of Object.entries({
        "kid s2 with the old key": jwt(claims(), { kid: "s2" }),
        "unknown kid": jwt(claims(), { secret: NEW_SESSION, kid: "s9" }),
        "no kid, unknown key": jwt(claims(), { secret: "not-a-session-key-at-all" }),
      })) {
        const r = await stack.purchase({ token, key: key(), body: { sku: s, qty: 1 }, edgeUrl: newEdge.url });
        assertProblem(r, 401, "unauthenticated", what);
      }
      for (const token of [NEW_ADMIN, ADMIN_TOKEN]) {
        const w = await stack.warmup([s], token, newEdge.url);
        assert.equal(w.status, 200, w.text);
      }
      // The old edge still works meanwhile (it has not been replaced everywhere yet).
      await buy(oldEdge, tokenFor(user()), "old edge, origin [new, old]");

      // 3. Every edge signs with e2: the origin forgets the old key, the edge its old secrets.
      await stack.restartOrigin({ EDGE_SHARED_SECRETS: `e2:${NEW_EDGE}`, ADMIN_TOKENS: NEW_ADMIN });
      await buy(newEdge.url, jwt(claims(), { secret: NEW_SESSION, kid: "s2" }), "new edge, origin [new]");
      assert.deepEqual(await stack.originSignatures(), { "v2/e2": 1 });
      // Traffic signed with the retired key is refused by the origin (401 bad_signature), which
      // the old edge turns into a 503 for its shopper; nothing is bought.
      const before = (await stack.originSku(s)).body.stock;
      const refused = await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 1 }, edgeUrl: oldEdge });
      assertProblem(refused, 503, "unavailable", "old edge after the old key was retired");
      assert.equal((await stack.originSku(s)).body.stock, before);
      assert.match(stack.logs(), /refused edge signature/);
      // The retired admin token no longer changes anything on the origin.
      await assert.rejects(stack.putSku(s, { stock: 1 }), /401/);
      assert.equal((await stack.originSku(s)).body.stock, before);
      await stack.putSku(s, { stock: before, adminToken: NEW_ADMIN });
    } finally {
      if (newEdge) await newEdge.stop();
      await stack.restartOrigin();
    }
    // Back to the suite's configuration: the suite's edge buys again.
    await buy(oldEdge, tokenFor(user()), "suite configuration restored");
  });
});
