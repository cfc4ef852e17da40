// End-to-end: the proof of work (issue 28) — ALTCHA challenges from GET /v1/challenge, solved by
// ALTCHA's own library (`altcha-lib`'s v1 solver, and its v2 one for a SKU whose
// `proof_of_work.algorithm` is `PBKDF2/SHA-256`, issue 38) and verified by it, then spent once by
// a join or a purchase. The BUILT worker in workerd in front of the REAL origin; "reached the origin" is
// the origin's own /metrics (`origin_purchase_requests_total`), and what the origin received is
// read through a pass-through in front of it.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createChallenge, solveChallenge, verifySolution } from "altcha-lib/v1";
import { createChallenge as createV2, solveChallenge as solveV2, verifySolution as verifyV2 } from "altcha-lib";
import { deriveKey as pbkdf2 } from "altcha-lib/algorithms/pbkdf2";

import { POW_KID, POW_SECRET, Stack, assertProblem, originProxy, response, tokenFor, unique } from "./harness.mjs";

const stack = new Stack();
/** The edge in front of a pass-through of the origin, to see what the origin receives. */
let proxy;
let seen;

before(async () => {
  await stack.start();
  proxy = await originProxy(stack.originUrl);
  seen = await stack.startEdge({ ORIGIN_URL: proxy.url }, "proxied");
});

after(async () => {
  await seen?.stop();
  await proxy?.close();
  await stack.stop();
});

/** A fresh SKU on sale with `extra` fields, warmed at the edge(s). */
async function sale(extra = {}, { stock = 100, maxPerUser = 5 } = {}) {
  const sku = unique("POW");
  await stack.putSkuBody(sku, { name: "Shoe", price_cents: 1999, stock, max_per_user: maxPerUser, ...extra });
  for (const url of [stack.edgeUrl, seen.url]) {
    const w = await stack.warmup([sku], undefined, url);
    assert.equal(w.status, 200, w.text);
  }
  return sku;
}

const POW = { proof_of_work: { min_bits: 4, max_bits: 10 } };

async function challenge(sku, token, edgeUrl = stack.edgeUrl) {
  return response(
    await fetch(`${edgeUrl}/v1/challenge?sku=${encodeURIComponent(sku)}`, {
      headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
    }),
  );
}

/** Solves a challenge with altcha-lib, as the widget does; the Flashgate-Proof value. */
async function solve(c) {
  const solution = await solveChallenge(c.challenge, c.salt, c.algorithm, c.maxnumber).promise;
  assert.ok(solution, `altcha-lib found no number for ${JSON.stringify(c)}`);
  return btoa(JSON.stringify({ algorithm: c.algorithm, challenge: c.challenge, number: solution.number, salt: c.salt, signature: c.signature }));
}

/** A fresh challenge of `sku` for `token`'s shopper, solved. */
async function proofFor(sku, token, edgeUrl) {
  const r = await challenge(sku, token, edgeUrl);
  assert.equal(r.status, 200, r.text);
  return solve(r.json);
}

const buy = (sku, token, { key = unique("k"), proof, edgeUrl, headers = {} } = {}) =>
  stack.purchase({
    token,
    key,
    body: { sku, qty: 1 },
    edgeUrl,
    headers: proof === undefined ? headers : { ...headers, "flashgate-proof": proof },
  });

describe("a sale without proof_of_work", () => {
  test("buys as before, ignores a stray Flashgate-Proof, and has no challenge", async () => {
    const sku = await sale();
    const token = tokenFor(unique("plain"));
    const r = await buy(sku, token, { proof: "anything" });
    assert.equal(r.status, 201, r.text);
    assertProblem(await challenge(sku, token), 409, "proof_not_required");
  });
});

describe("GET /v1/challenge", () => {
  test("answers an ALTCHA challenge bound to the SKU, the shopper and the purpose, never cached", async () => {
    const sku = await sale(POW);
    const user = unique("alice");
    const r = await challenge(sku, tokenFor(user));
    assert.equal(r.status, 200, r.text);
    assert.match(r.headers.get("content-type"), /^application\/json/);
    assert.equal(r.headers.get("cache-control"), "no-store");
    const c = r.json;
    assert.deepEqual(Object.keys(c).sort(), ["algorithm", "challenge", "maxnumber", "salt", "signature"]);
    assert.equal(c.algorithm, "SHA-256");
    assert.ok(c.maxnumber >= 2 ** 4 && c.maxnumber <= 2 ** 10, r.text);
    const params = new URLSearchParams(c.salt.split("?")[1]);
    assert.equal(params.get("sku"), sku);
    assert.equal(params.get("user"), user);
    assert.equal(params.get("purpose"), "purchase");
    assert.equal(params.get("kid"), POW_KID);
    const expires = Number(params.get("expires"));
    assert.ok(expires > Date.now() / 1000 && expires <= Date.now() / 1000 + 121, c.salt);
    assert.ok(c.salt.endsWith("&"), "ALTCHA's delimiter");
    // Made here, verified by ALTCHA's own library with the secret: the formats agree.
    assert.equal(await verifySolution(await solve(c), POW_SECRET), true);
  });

  test("needs a shopper and a known SKU", async () => {
    const sku = await sale(POW);
    assertProblem(await challenge(sku, undefined), 401, "unauthenticated");
    assertProblem(await challenge(sku, "not.a.token"), 401, "unauthenticated");
    assertProblem(await challenge("bad sku!", tokenFor("u")), 400, "invalid_request");
    assertProblem(await response(await fetch(`${stack.edgeUrl}/v1/challenge`, { headers: { authorization: `Bearer ${tokenFor("u")}` } })), 400, "invalid_request");
    assertProblem(await challenge(unique("NOPE"), tokenFor("u")), 404, "unknown_sku");
    const post = await response(await fetch(`${stack.edgeUrl}/v1/challenge?sku=${sku}`, { method: "POST" }));
    assertProblem(post, 405, "method_not_allowed");
  });

  test("grows harder with the SKU's arriving shoppers, from min_bits to max_bits", async () => {
    const sku = await sale({ proof_of_work: { min_bits: 3, max_bits: 12 } });
    const first = await challenge(sku, tokenFor(unique("first")));
    assert.equal(first.json.maxnumber, 2 ** 3, "quiet: min_bits");
    // 80 shoppers within about a second: past POW_PEAK_ARRIVALS_PER_SEC (50).
    const burst = await Promise.all(Array.from({ length: 80 }, () => challenge(sku, tokenFor(unique("burst")))));
    const hardest = Math.max(...burst.map((r) => r.json.maxnumber));
    assert.equal(hardest, 2 ** 12, "the peak: max_bits");
  });

  test("one account's flood does not set the price, and is rate-limited like purchases", async () => {
    // Issue 35: one signed-in account asking ~50 challenges a second kept everyone at max_bits.
    const sku = await sale({ proof_of_work: { min_bits: 3, max_bits: 12 } });
    const flooder = tokenFor(unique("flooder"));
    const flood = await Promise.all(Array.from({ length: 80 }, () => challenge(sku, flooder)));
    const issued = flood.filter((r) => r.status === 200);
    const hardest = Math.max(...issued.map((r) => r.json.maxnumber));
    assert.equal(hardest, 2 ** 3, "the flooder alone pays min_bits");
    // The suite's rate limit is 50 per hour: the flood gets 50 challenges, then 429s.
    assert.equal(issued.length, 50, flood.map((r) => r.status).join(","));
    for (const r of issued) assert.equal(r.headers.get("ratelimit-policy"), '"challenge";q=50;w=3600');
    const limited = flood.filter((r) => r.status !== 200);
    assert.equal(limited.length, 30);
    for (const r of limited) {
      assertProblem(r, 429, "rate_limited");
      const retry = Number(r.headers.get("retry-after"));
      assert.ok(retry >= 1, r.headers.get("retry-after"));
      assert.equal(r.headers.get("ratelimit"), `"challenge";r=0;t=${retry}`);
    }
    // Another shopper meanwhile pays for one other shopper, not for the flood.
    const honest = await challenge(sku, tokenFor(unique("honest")));
    assert.equal(honest.status, 200, honest.text);
    assert.ok(honest.json.maxnumber <= 2 ** 5, `one other shopper's price: ${honest.json.maxnumber}`);
  });

  test("a purchase challenge of a sale that has not started is 409 not_started; a proof issued before the start cannot buy", async () => {
    // Issue 35: a farm fetched challenges in the quiet minute before the start at min_bits,
    // solved them at leisure and fired them at T+0.
    const startMs = Date.now() + 4_000;
    const sku = await sale({ ...POW, starts_at: new Date(startMs).toISOString() });
    const user = unique("early");
    const token = tokenFor(user);
    const early = await challenge(sku, token);
    assertProblem(early, 409, "not_started");
    const retry = Number(early.headers.get("retry-after"));
    assert.ok(retry >= 1 && retry <= 5, early.headers.get("retry-after"));
    assert.ok(early.json.starts_at, early.text);
    // A challenge made before the start with the edge's own secret (as one issued then would be):
    // after the start it is refused, and spends nothing.
    const issuedS = Math.floor(startMs / 1000) - 10;
    const pre = await solve(
      await createChallenge({ hmacKey: POW_SECRET, maxnumber: 64, params: { kid: POW_KID, purpose: "purchase", sku, user, issued: String(issuedS) }, expires: new Date(startMs + 60_000) }),
    );
    await new Promise((ok) => setTimeout(ok, Math.max(0, startMs - Date.now()) + 100));
    const before = await stack.originPurchaseCalls();
    const stale = await buy(sku, token, { proof: pre });
    assertProblem(stale, 403, "proof_rejected");
    assert.match(stale.json.detail, /issued before the sale started/);
    assert.equal(await stack.originPurchaseCalls(), before);
    // From the start on, challenges are issued and buy.
    const ok = await buy(sku, token, { proof: await proofFor(sku, token) });
    assert.equal(ok.status, 201, ok.text);
  });
});

describe("a purchase of a sale with proof_of_work", () => {
  test("without a proof is 428 proof_required, saying where to get one, and reaches nobody", async () => {
    const sku = await sale(POW);
    const token = tokenFor(unique("noproof"));
    const before = await stack.originPurchaseCalls();
    const key = unique("k");
    const r = await buy(sku, token, { key });
    assertProblem(r, 428, "proof_required");
    assert.equal(r.json.challenge_url, `/v1/challenge?sku=${sku}`);
    assert.equal(await stack.originPurchaseCalls(), before, "the origin never heard of it");
    // Not stored with the key: the same key with a proof buys.
    const ok = await buy(sku, token, { key, proof: await proofFor(sku, token) });
    assert.equal(ok.status, 201, ok.text);
    assert.equal(ok.headers.get("idempotent-replayed"), null);
  });

  test("with a solved challenge buys once; the proof never reaches the origin and cannot be used again", async () => {
    const sku = await sale(POW);
    const token = tokenFor(unique("solver"));
    const proof = await proofFor(sku, token, seen.url);
    const before = await stack.originPurchaseCalls();
    const key = unique("k");
    const r = { key, ...(await buy(sku, token, { proof, edgeUrl: seen.url, key })) };
    assert.equal(r.status, 201, r.text);
    assert.equal(await stack.originPurchaseCalls(), before + 1);
    const forwarded = proxy.requests("POST /v1/purchases").at(-1);
    assert.ok(forwarded, "the purchase went through the pass-through");
    assert.equal(forwarded.headers["flashgate-proof"], undefined, "never forwarded");
    // A replay of the proof with another key: refused by the shopper's own Durable Object,
    // before the rate limit is charged.
    const again = await buy(sku, token, { proof, edgeUrl: seen.url, key: unique("k") });
    assertProblem(again, 403, "proof_rejected", "replayed");
    assert.match(again.json.detail, /used before/);
    assert.equal(again.json.challenge_url, `/v1/challenge?sku=${sku}`);
    assert.equal(again.headers.get("idempotent-replayed"), null);
    // With the key that bought: that key's 201 (a retry is answered before the proof is looked
    // at; edge/e2e/retry.test.mjs).
    const retried = await buy(sku, token, { proof, edgeUrl: seen.url, key: r.key });
    assert.equal(retried.status, 201, retried.text);
    assert.equal(retried.headers.get("idempotent-replayed"), "true");
    assert.equal(await stack.originPurchaseCalls(), before + 1, "no replay reached the origin");
  });

  test("another SKU's, another shopper's, a join's or an expired proof is 403 proof_rejected", async () => {
    const sku = await sale(POW);
    const other = await sale(POW);
    const alice = unique("alice");
    const token = tokenFor(alice);
    const before = await stack.originPurchaseCalls();
    assertProblem(await buy(sku, token, { proof: await proofFor(other, token) }), 403, "proof_rejected", "another SKU's");
    const bob = tokenFor(unique("bob"));
    assertProblem(await buy(sku, token, { proof: await proofFor(sku, bob) }), 403, "proof_rejected", "another shopper's");
    // Made by altcha-lib with the edge's secret: expired one second ago, or for a join.
    const made = async (params, expires) =>
      solve(await createChallenge({ hmacKey: POW_SECRET, maxnumber: 64, params: { kid: POW_KID, sku, user: alice, ...params }, expires }));
    const expired = await buy(sku, token, { proof: await made({ purpose: "purchase" }, new Date(Date.now() - 1_000)) });
    assertProblem(expired, 403, "proof_rejected", "expired");
    assert.match(expired.json.detail, /expired/);
    assertProblem(await buy(sku, token, { proof: await made({ purpose: "join" }, new Date(Date.now() + 60_000)) }), 403, "proof_rejected", "a join's");
    for (const junk of ["", "bm90IGpzb24=", "%%%", btoa(JSON.stringify({ algorithm: "SHA-256" }))]) {
      assertProblem(await buy(sku, token, { proof: junk }), junk === "" ? 428 : 403, junk === "" ? "proof_required" : "proof_rejected", `junk ${junk}`);
    }
    assert.equal(await stack.originPurchaseCalls(), before, "none reached the origin");
    // And the reverse of the format check: a challenge altcha-lib made with the secret buys.
    const ok = await buy(sku, token, { proof: await made({ purpose: "purchase" }, new Date(Date.now() + 60_000)) });
    assert.equal(ok.status, 201, ok.text);
  });
});

describe("a sale with a waiting room and proof_of_work", () => {
  test("joining needs a join proof; the pass then buys without one", async () => {
    const sku = await sale({ ...POW, waiting_room: { admit_per_minute: 6000, pass_secs: 60 } });
    const user = unique("queuer");
    const token = tokenFor(user);
    const join = (proof) =>
      fetch(`${stack.edgeUrl}/v1/queue/${sku}`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, ...(proof ? { "flashgate-proof": proof } : {}) },
      }).then(response);
    const none = await join();
    assertProblem(none, 428, "proof_required");
    const c = await challenge(sku, token);
    assert.equal(new URLSearchParams(c.json.salt.split("?")[1]).get("purpose"), "join");
    const proof = await solve(c.json);
    const joined = await join(proof);
    assert.equal(joined.status, 200, joined.text);
    assertProblem(await join(proof), 403, "proof_rejected", "a join proof twice");
    // A poll needs no proof; wait for the pass, then buy with it (no proof asked).
    let a = joined.json;
    const started = Date.now();
    while (!a.admitted) {
      assert.ok(Date.now() - started < 20_000, JSON.stringify(a));
      await new Promise((ok) => setTimeout(ok, 200));
      const poll = await response(await fetch(`${stack.edgeUrl}/v1/queue/${sku}`, { headers: { authorization: `Bearer ${token}`, "flashgate-queue-receipt": a.receipt } }));
      assert.equal(poll.status, 200, poll.text);
      a = poll.json;
    }
    const r = await buy(sku, token, { headers: { "flashgate-pass": a.pass } });
    assert.equal(r.status, 201, r.text);
  });
});

describe("a sale with proof_of_work in ALTCHA's v2 (PBKDF2/SHA-256, issue 38)", () => {
  const V2 = { proof_of_work: { min_bits: 4, max_bits: 12, algorithm: "PBKDF2/SHA-256" } };

  /** Solves a v2 challenge with altcha-lib's v2 solver; the payload as the widget 3.x submits it. */
  async function solveV2Payload(c) {
    const solution = await solveV2({ challenge: c, deriveKey: pbkdf2 });
    assert.ok(solution, `altcha-lib found no counter for ${JSON.stringify(c)}`);
    return btoa(JSON.stringify({ challenge: { parameters: c.parameters, signature: c.signature }, solution }));
  }

  test("the view shows the algorithm; the challenge is v2, bound like v1's, and altcha-lib solves and verifies it", async () => {
    const sku = await sale(V2);
    const view = await stack.originSku(sku);
    assert.deepEqual(view.body.proof_of_work, V2.proof_of_work);
    const user = unique("alice");
    const r = await challenge(sku, tokenFor(user));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get("cache-control"), "no-store");
    const c = r.json;
    assert.deepEqual(Object.keys(c).sort(), ["parameters", "signature"]);
    const p = c.parameters;
    assert.equal(p.algorithm, "PBKDF2/SHA-256");
    assert.equal(p.keyLength, 32);
    assert.match(p.keyPrefix, /^[0-9a-f]{32}$/);
    assert.deepEqual({ ...p.data, issued: undefined }, { issued: undefined, kid: POW_KID, purpose: "purchase", sku, user });
    assert.ok(Math.abs(p.data.issued - Date.now() / 1000) < 5, JSON.stringify(p));
    assert.ok(p.expiresAt > Date.now() / 1000 && p.expiresAt <= Date.now() / 1000 + 121, JSON.stringify(p));
    // Quiet: min_bits (4) is 16 counters of one iteration.
    assert.equal(p.cost, 1);
    // Made here, solved and verified by ALTCHA's own v2 library with the secret.
    const solution = await solveV2({ challenge: c, deriveKey: pbkdf2 });
    assert.ok(solution.counter < 16, JSON.stringify(solution));
    const verdict = await verifyV2({ challenge: c, solution, deriveKey: pbkdf2, hmacSignatureSecret: POW_SECRET, hmacKeySignatureSecret: POW_SECRET });
    assert.equal(verdict.verified, true, JSON.stringify(verdict));
  });

  test("grows harder with demand: more PBKDF2 iterations per counter, up to max_bits", async () => {
    const sku = await sale({ proof_of_work: { min_bits: 10, max_bits: 16, algorithm: "PBKDF2/SHA-256" } });
    const first = await challenge(sku, tokenFor(unique("first")));
    assert.equal(first.json.parameters.cost, 1, "quiet: 10 bits = 1,024 counters of 1 iteration");
    const burst = await Promise.all(Array.from({ length: 80 }, () => challenge(sku, tokenFor(unique("burst")))));
    const hardest = Math.max(...burst.map((r) => r.json.parameters.cost));
    assert.equal(hardest, 64, "the peak: 16 bits = 1,024 counters of 64 iterations");
  });

  test("buys once with altcha-lib's solution; a replay, another shopper's or a forged one is refused", async () => {
    const sku = await sale(V2);
    const token = tokenFor(unique("v2solver"));
    const r = await challenge(sku, token, seen.url);
    assert.equal(r.status, 200, r.text);
    const proof = await solveV2Payload(r.json);
    const before = await stack.originPurchaseCalls();
    const ok = await buy(sku, token, { proof, edgeUrl: seen.url });
    assert.equal(ok.status, 201, ok.text);
    assert.equal(await stack.originPurchaseCalls(), before + 1);
    assert.equal(proxy.requests("POST /v1/purchases").at(-1).headers["flashgate-proof"], undefined, "never forwarded");
    const again = await buy(sku, token, { proof, edgeUrl: seen.url });
    assertProblem(again, 403, "proof_rejected", "replayed");
    assert.match(again.json.detail, /used before/);
    // Another shopper's proof, a key that is not the challenge's, a challenge made without the
    // edge's secret: refused, and none reaches the origin.
    const bob = tokenFor(unique("bob"));
    const bobs = await solveV2Payload((await challenge(sku, bob)).json);
    assertProblem(await buy(sku, token, { proof: bobs }), 403, "proof_rejected", "another shopper's");
    const mine = (await challenge(sku, token)).json;
    const wrongKey = btoa(JSON.stringify({ challenge: mine, solution: { counter: 0, derivedKey: "00".repeat(32) } }));
    assertProblem(await buy(sku, token, { proof: wrongKey }), 403, "proof_rejected", "a wrong key");
    const alien = await createV2({
      algorithm: "PBKDF2/SHA-256", cost: 1, counter: 3, deriveKey: pbkdf2, expiresAt: Math.floor(Date.now() / 1000) + 60,
      data: { kid: POW_KID, purpose: "purchase", sku, user: "x" }, hmacSignatureSecret: "not-the-edge-secret-0123456789", hmacKeySignatureSecret: "not-the-edge-secret-0123456789",
    });
    assertProblem(await buy(sku, token, { proof: await solveV2Payload(alien) }), 403, "proof_rejected", "another secret's");
    assert.equal(await stack.originPurchaseCalls(), before + 1, "none of them reached the origin");
    // A challenge altcha-lib made with the edge's secret and binding buys (the formats agree).
    const user = unique("made");
    const made = await createV2({
      algorithm: "PBKDF2/SHA-256", cost: 8, counter: 5, deriveKey: pbkdf2, expiresAt: Math.floor(Date.now() / 1000) + 60,
      data: { kid: POW_KID, purpose: "purchase", sku, user }, hmacSignatureSecret: POW_SECRET, hmacKeySignatureSecret: POW_SECRET,
    });
    const bought = await buy(sku, tokenFor(user), { proof: await solveV2Payload(made) });
    assert.equal(bought.status, 201, bought.text);
  });

  test("joining a waiting room takes a v2 join proof, once", async () => {
    const sku = await sale({ ...V2, waiting_room: { admit_per_minute: 6000, pass_secs: 60 } });
    const token = tokenFor(unique("v2queuer"));
    const join = (proof) =>
      fetch(`${stack.edgeUrl}/v1/queue/${sku}`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, ...(proof ? { "flashgate-proof": proof } : {}) },
      }).then(response);
    const c = await challenge(sku, token);
    assert.equal(c.json.parameters.data.purpose, "join");
    const proof = await solveV2Payload(c.json);
    const joined = await join(proof);
    assert.equal(joined.status, 200, joined.text);
    assertProblem(await join(proof), 403, "proof_rejected", "a join proof twice");
  });
});
