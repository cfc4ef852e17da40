// Hostile inputs at the edge, end to end: the BUILT worker in workerd in front of the REAL origin.
// Stale answers must not close the sold-out shield, unknown SKUs must not each cost an origin
// query, a chunked body must not be buffered whole, and session tokens must have bounds.
// Run with scripts/test-edge.sh (builds everything first).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { request } from "node:http";
import { connect } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";

import { ADMIN_TOKEN, Stack, assertProblem, jwt, now, originProxy, tokenFor, unique } from "./harness.mjs";

const stack = new Stack();
/** A pass-through between a second edge and the origin: counts and can hold origin answers. */
let proxy;
/** The second edge, whose origin is `proxy`. */
let edge;

before(async () => {
  await stack.start();
  proxy = await originProxy(stack.originUrl);
  // A generous origin deadline: the proxy holds some answers on purpose.
  edge = await stack.startEdge({ ORIGIN_URL: proxy.url, ORIGIN_TIMEOUT_MS: "20000" }, "wrangler-proxied");
});

after(async () => {
  await edge?.stop();
  await proxy?.close();
  await stack.stop();
});

const sku = (opts) => stack.freshSku(opts);

/**
 * Waits until the origin has finished marking `sku` sold out (it logs "sku sold out; fast path on"
 * just after answering the last sale). A restock that races with that write is the origin's own
 * issue (13, item 2); these tests are about the edge, so they restock after it. Gives up after
 * 5 s without failing, in case the origin stops logging it that way.
 */
async function originMarkedSoldOut(sku) {
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) {
    const lines = readFileSync(stack.originLog, "utf8").split("\n");
    if (lines.some((l) => l.includes("fast path on") && l.includes(sku))) return;
    await sleep(50);
  }
}

const user = () => unique("user");
const key = () => unique("key");

describe("stale origin answers never close the sold-out shield (issue 13, item 3)", () => {
  test("a replayed remaining: 0 of the earlier sale, after a restock and a warmup, does not shut out the next shopper", async () => {
    const s = await sku({ stock: 1, maxPerUser: 5 });
    const u = user();
    const k = key();
    // The earlier sale's last unit, decided and stored by the origin, unknown to the user's
    // Durable Object (its record purged after the edge's retention, or its finish lost).
    const last = await stack.originPurchase({ user: u, key: k, body: { sku: s, qty: 1 } });
    assert.equal(last.status, 201, last.text);
    assert.equal(last.json.remaining, 0);

    await originMarkedSoldOut(s);
    await stack.putSku(s, { stock: 5, maxPerUser: 5 });
    const w = await stack.warmup([s]);
    assert.equal(w.status, 200, w.text);
    assert.deepEqual(w.json.sold_out, []);

    // The shopper retries the old key: the origin replays its stored 201 with remaining 0.
    const replay = await stack.purchase({ token: tokenFor(u), key: k, body: { sku: s, qty: 1 } });
    assert.equal(replay.status, 201, replay.text);
    assert.equal(replay.headers.get("idempotent-replayed"), "true");
    assert.equal(replay.json.order_id, last.json.order_id);
    assert.equal(replay.json.remaining, 0);

    // The next shopper still reaches the origin, which sells from the restock.
    const before = await stack.originPurchaseCalls();
    const next = await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 1 } });
    assert.equal(next.status, 201, `the replay closed the shield: ${next.status} ${next.text}`);
    assert.equal(next.headers.get("idempotent-replayed"), null);
    assert.equal(next.json.remaining, 4);
    assert.equal(await stack.originPurchaseCalls(), before + 1, "decided by the origin");
  });

  test("an answer decided before a restock that arrives after the warmup does not close the shield", async () => {
    const s = await sku({ stock: 1, maxPerUser: 5 });
    const held = proxy.hold((method, path) => method === "POST" && path === "/v1/purchases");
    const buying = stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 1 }, edgeUrl: edge.url });
    // The origin sold the last unit of the earlier sale; its answer is on its way, slowly.
    const decided = await held.arrived;
    assert.equal(decided.status, 201, decided.body);
    assert.equal(JSON.parse(decided.body).remaining, 0);

    await originMarkedSoldOut(s);
    await stack.putSku(s, { stock: 5, maxPerUser: 5 });
    const w = await stack.warmup([s], ADMIN_TOKEN, edge.url);
    assert.equal(w.status, 200, w.text);
    held.release();
    const bought = await buying;
    assert.equal(bought.status, 201, bought.text);
    assert.equal(bought.json.remaining, 0);

    const before = proxy.count("POST /v1/purchases");
    const next = await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 1 }, edgeUrl: edge.url });
    assert.equal(next.status, 201, `the late answer closed the shield: ${next.status} ${next.text}`);
    assert.equal(next.json.remaining, 4);
    assert.equal(proxy.count("POST /v1/purchases"), before + 1, "decided by the origin");
  });

  test("a shield answer is not stored with the key: retried after the restock, the same key buys", async () => {
    const s = await sku({ stock: 1, maxPerUser: 5 });
    const w = await stack.warmup([s]);
    assert.equal(w.status, 200, w.text);
    assert.equal((await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 1 } })).status, 201);
    const token = tokenFor(user());
    const k = key();
    const body = { sku: s, qty: 1 };
    const before = await stack.originPurchaseCalls();
    assertProblem(await stack.purchase({ token, key: k, body }), 409, "sold_out", "shielded");
    const again = await stack.purchase({ token, key: k, body });
    assertProblem(again, 409, "sold_out", "shielded again");
    assert.equal(again.headers.get("idempotent-replayed"), null, "checked again, not replayed");
    assert.equal(await stack.originPurchaseCalls(), before, "the shield answered");

    await originMarkedSoldOut(s);
    await stack.putSku(s, { stock: 3, maxPerUser: 5 });
    assert.equal((await stack.warmup([s])).status, 200);
    const retried = await stack.purchase({ token, key: k, body });
    assert.equal(retried.status, 201, retried.text);
    assert.equal(retried.headers.get("idempotent-replayed"), null);
    // From now on it is the origin's decision, stored and replayed.
    const replay = await stack.purchase({ token, key: k, body });
    assert.equal(replay.status, 201);
    assert.equal(replay.headers.get("idempotent-replayed"), "true");
    assert.equal(replay.text, retried.text);
  });
});

describe("unknown SKUs are remembered briefly (issue 13, item 6)", () => {
  test("two views of the same unknown SKU ask the origin once; a warmup or the TTL ends it", async (t) => {
    const name = unique("NOSUCH");
    const path = `/v1/skus/${name}`;
    const first = await stack.get(path, {}, edge.url);
    assertProblem(first, 404, "unknown_sku", "first view");
    const second = await stack.get(path, {}, edge.url);
    assertProblem(second, 404, "unknown_sku", "second view");
    assert.equal(proxy.count(`GET ${path}`), 1, "the origin was asked once");
    assert.equal(second.text, first.text);
    assert.equal(first.headers.get("flashgate-cache"), "MISS");
    assert.equal(first.headers.get("cache-control"), "public, max-age=5");
    assert.equal(second.headers.get("flashgate-cache"), "HIT");

    // After SKU_MISSING_TTL_SECS (5 s) the origin is asked again (polled, with a generous bound).
    const started = Date.now();
    while (proxy.count(`GET ${path}`) < 2 && Date.now() - started < 30_000) {
      await sleep(500);
      assertProblem(await stack.get(path, {}, edge.url), 404, "unknown_sku", "while remembered");
    }
    const waited = Date.now() - started;
    t.diagnostic(`origin asked again ${waited} ms after the second view`);
    assert.equal(proxy.count(`GET ${path}`), 2, `asked again after ${waited} ms`);
    assert.ok(waited >= 3_000, `remembered for ${waited} ms only`);

    // Created: a warmup makes it visible at once, although it is remembered as unknown.
    assertProblem(await stack.get(path, {}, edge.url), 404, "unknown_sku", "remembered again");
    await stack.putSku(name, { stock: 2 });
    const w = await stack.warmup([name], ADMIN_TOKEN, edge.url);
    assert.deepEqual(w.json?.warmed, [name], w.text);
    const found = await stack.get(path, {}, edge.url);
    assert.equal(found.status, 200, found.text);
    assert.equal(found.json.stock, 2);
  });
});

/**
 * POSTs `total` bytes of body with `Transfer-Encoding: chunked` (no Content-Length), 64 KiB per
 * millisecond at most (a fast client: ~500 Mbit/s) under backpressure, over a raw socket, and
 * records how much it had sent, and whether it had finished, when the answer arrived. It behaves
 * as RFC 9112 §9.5 asks of a client: it watches for an early answer while it sends, and when one
 * comes it stops sending and ends the body at once (the closing empty chunk), then reads the
 * answer whole.
 *
 * Local workerd, unlike Cloudflare's front line, terminates the client's TCP connection itself,
 * which makes early answers fragile here: node's HTTP client drops an answer that comes with a
 * reset while it writes (hence the raw socket); a client that keeps sending after the answer
 * races the edge's bounded discard (`MAX_DISCARDED_BYTES`), whose cancel can tear the connection
 * down before the 413's body is out (the status line arrived alone once in CI). `wrangler dev`'s
 * proxy adds its own after an early answer, which workerd alone does not: the next request fails
 * (503 "Your worker restarted mid-request") when the client ended its body at the answer, and
 * stalls when it gave up mid-body; hence this client talks to workerd alone.
 */
function streamHugeBody(url, headers, total) {
  const { hostname, port, host } = new URL(url);
  return new Promise((resolve, reject) => {
    const started = Date.now();
    let sent = 0;
    let ended = false;
    let closed = false;
    let at = null;
    let giveUp;
    let got = Buffer.alloc(0);
    const sock = connect(Number(port), hostname);
    const finish = () => {
      const text = got.toString();
      const [head, ...rest] = text.split("\r\n\r\n");
      if (!at || !head.startsWith("HTTP/1.1 ")) {
        reject(new Error(`no answer (${sent} bytes sent, ended ${ended}): ${JSON.stringify(text.slice(0, 200))}`));
        return;
      }
      const [status, ...fields] = head.split("\r\n");
      const h = new Headers(fields.map((f) => [f.slice(0, f.indexOf(":")), f.slice(f.indexOf(":") + 1).trim()]));
      const body = rest.join("\r\n\r\n");
      let json;
      try {
        json = JSON.parse(body);
      } catch {
        json = undefined;
      }
      resolve({ status: Number(status.split(" ")[1]), headers: h, text: body, json, ...at });
    };
    // The whole answer is in once its Content-Length bytes follow the head.
    const answerComplete = () => {
      const end = got.indexOf("\r\n\r\n");
      if (end < 0) return false;
      const length = /\r\ncontent-length:\s*(\d+)/i.exec(got.subarray(0, end).toString());
      return length !== null && got.length - (end + 4) >= Number(length[1]);
    };
    sock.on("data", (d) => {
      got = Buffer.concat([got, d]);
      if (!at) {
        at = { ms: Date.now() - started, sent, ended };
        // An early answer: stop sending, and end the body where it is.
        if (!ended && !sock.destroyed) {
          ended = true;
          sock.write("0\r\n\r\n");
        }
      }
      if (answerComplete()) sock.end();
    });
    // Writing into a connection the edge closed after answering is expected.
    sock.on("error", () => {});
    sock.on("close", () => {
      closed = true;
      clearTimeout(giveUp);
      finish();
    });
    const frame = Buffer.concat([Buffer.from("10000\r\n"), Buffer.alloc(64 * 1024, " "), Buffer.from("\r\n")]);
    const pump = () => {
      if (!closed && !sock.destroyed && !ended && sent < total) {
        sent += 64 * 1024;
        if (sock.write(frame)) setTimeout(pump, 1);
        else sock.once("drain", () => setTimeout(pump, 1));
        return;
      }
      if (!closed && !sock.destroyed && !ended) {
        ended = true;
        sock.write("0\r\n\r\n");
        // Done sending; give up on an answer after a generous while.
        giveUp = setTimeout(() => sock.end(), 60_000);
      }
    };
    sock.on("connect", () => {
      const lines = [`POST /v1/purchases HTTP/1.1`, `Host: ${host}`, "Transfer-Encoding: chunked", "Connection: close"];
      for (const [k, v] of Object.entries(headers)) lines.push(`${k}: ${v}`);
      sock.write(`${lines.join("\r\n")}\r\n\r\n`);
      pump();
    });
  });
}

describe("a chunked body is read under the cap (issue 13, item 6)", () => {
  // workerd alone, without `wrangler dev`'s dev-only proxy in front (see `streamHugeBody`),
  // warmed by one purchase: the first request of a fresh local isolate, if it is the early 413,
  // sometimes finds its connection closed with no answer (2 of 20 fresh edges here; none in over
  // a thousand requests to warm ones).
  let workerd;
  before(async () => {
    workerd = await stack.startEdge({}, "miniflare-chunked", "miniflare");
    const s = await sku({ stock: 1 });
    const warm = await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 1 }, edgeUrl: workerd.url });
    assert.equal(warm.status, 201, warm.text);
  });
  after(async () => {
    await workerd?.stop();
  });

  test("50 MB without Content-Length: 413 before the client has sent it, and the origin is not called", async (t) => {
    const s = await sku({ stock: 10 });
    const total = 50 * 1024 * 1024;
    const before = await stack.originPurchaseCalls();
    const r = await streamHugeBody(
      workerd.url,
      { authorization: `Bearer ${tokenFor(user())}`, "idempotency-key": key(), "content-type": "application/json" },
      total,
    );
    t.diagnostic(`413 after ${r.ms} ms, ${r.sent} of ${total} bytes sent`);
    assertProblem(r, 413, "payload_too_large");
    assert.equal(r.ended, false, `answered only after the whole body was sent (${r.sent} bytes, ${r.ms} ms)`);
    assert.ok(r.sent < total, `${r.sent} bytes sent before the answer`);
    assert.ok(r.ms < 15_000, `answered after ${r.ms} ms`);
    assert.equal(await stack.originPurchaseCalls(), before, "nothing was forwarded");
    // The edge still serves.
    const ok = await stack.purchase({ token: tokenFor(user()), key: key(), body: { sku: s, qty: 1 }, edgeUrl: workerd.url });
    assert.equal(ok.status, 201, ok.text);
  });

  test("a small chunked body is read whole and buys", async () => {
    const s = await sku({ stock: 10 });
    const text = JSON.stringify({ sku: s, qty: 1 });
    const r = await new Promise((resolve, reject) => {
      const req = request(`${stack.edgeUrl}/v1/purchases`, {
        method: "POST",
        headers: { authorization: `Bearer ${tokenFor(user())}`, "idempotency-key": key(), "content-type": "application/json" },
      });
      req.on("response", (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode, text: Buffer.concat(chunks).toString() }));
      });
      req.on("error", reject);
      // In three pieces, without Content-Length.
      req.write(text.slice(0, 3));
      req.write(text.slice(3, 10));
      req.end(text.slice(10));
    });
    assert.equal(r.status, 201, r.text);
  });
});

describe("session tokens have bounds (issue 13, item 7)", () => {
  test("absurd dates and lifetimes above SESSION_MAX_LIFETIME_SECS (default one day) are 401", async () => {
    const s = await sku({ stock: 10 });
    const day = 86_400;
    const cases = {
      "exp 1e300": jwt({ sub: user(), exp: 1e300 }),
      "exp far in the future, with iat": jwt({ sub: user(), iat: now(), exp: now() + day + 600 }),
      "exp beyond a day, without iat": jwt({ sub: user(), exp: now() + day + 600 }),
      "iat -1e300": jwt({ sub: user(), iat: -1e300, exp: now() + 600 }),
      "nbf 1e300": jwt({ sub: user(), exp: now() + 600, nbf: 1e300 }),
      "iat not a number": jwt({ sub: user(), iat: "yesterday", exp: now() + 600 }),
    };
    const before = await stack.originPurchaseCalls();
    for (const [name, token] of Object.entries(cases)) {
      assertProblem(await stack.purchase({ token, key: key(), body: { sku: s, qty: 1 } }), 401, "unauthenticated", name);
    }
    assert.equal(await stack.originPurchaseCalls(), before, "no such token reaches the origin");
    const ok = await stack.purchase({ token: jwt({ sub: user(), iat: now(), exp: now() + day - 60 }), key: key(), body: { sku: s, qty: 1 } });
    assert.equal(ok.status, 201, ok.text);
  });

  test("SESSION_ISSUER, SESSION_AUDIENCE and SESSION_MAX_LIFETIME_SECS, when set, must be met", async () => {
    const s = await sku({ stock: 10 });
    const configured = await stack.startEdge(
      { SESSION_ISSUER: "https://shop.example", SESSION_AUDIENCE: "flashgate", SESSION_MAX_LIFETIME_SECS: "600" },
      "wrangler-token-rules",
    );
    try {
      // One instant for every token: `exp` below is relative to the same `iat`, however long the
      // purchases in between take.
      const t = now();
      const claims = (extra) => ({ sub: user(), iat: t, exp: t + 300, iss: "https://shop.example", aud: "flashgate", ...extra });
      const buy = (token) => stack.purchase({ token, key: key(), body: { sku: s, qty: 1 }, edgeUrl: configured.url });
      for (const [name, extra] of Object.entries({ "aud string": {}, "aud array": { aud: ["wallet", "flashgate"] } })) {
        const r = await buy(jwt(claims(extra)));
        assert.equal(r.status, 201, `${name}: ${r.text}`);
      }
      const refused = {
        "no iss": { iss: undefined },
        "other iss": { iss: "https://evil.example" },
        "no aud": { aud: undefined },
        "other aud": { aud: "wallet" },
        "aud array without it": { aud: ["wallet"] },
        "lifetime 601 s > 600": { exp: t + 601 },
      };
      const before = await stack.originPurchaseCalls();
      for (const [name, extra] of Object.entries(refused)) {
        assertProblem(await buy(jwt(claims(extra))), 401, "unauthenticated", name);
      }
      assert.equal(await stack.originPurchaseCalls(), before);
    } finally {
      await configured.stop();
    }
  });
});
