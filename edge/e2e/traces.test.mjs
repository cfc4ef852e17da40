// W3C trace context from the shopper, through the edge (in workerd), to the real origin's exported
// spans (issue 38): the origin exports with OTLP over HTTP to a receiver run here, which decodes
// the protobuf ExportTraceServiceRequest far enough to read each span's ids and name.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

import { Stack, tokenFor, unique } from "./harness.mjs";

const stack = new Stack();
/** Every span received: { traceId, spanId, parentSpanId, name } (ids in hex). */
const spans = [];
let receiver;

/** The fields of one protobuf message: [fieldNumber, wireType, value] (value: Buffer for wire type 2). */
function fields(buf) {
  const out = [];
  let i = 0;
  const varint = () => {
    let v = 0n;
    let shift = 0n;
    for (;;) {
      const b = buf[i++];
      v |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return v;
      shift += 7n;
    }
  };
  while (i < buf.length) {
    const key = Number(varint());
    const [field, wire] = [key >> 3, key & 7];
    if (wire === 0) out.push([field, wire, varint()]);
    else if (wire === 1) (out.push([field, wire, buf.subarray(i, i + 8)]), (i += 8));
    else if (wire === 5) (out.push([field, wire, buf.subarray(i, i + 4)]), (i += 4));
    else if (wire === 2) {
      const len = Number(varint());
      out.push([field, wire, buf.subarray(i, i + len)]);
      i += len;
    } else throw new Error(`wire type ${wire}`);
  }
  return out;
}

const sub = (buf, n) => fields(buf).filter(([f, w]) => f === n && w === 2).map(([, , v]) => v);

/** ExportTraceServiceRequest → resource_spans (1) → scope_spans (2) → spans (2). */
function decode(body) {
  for (const resourceSpans of sub(body, 1)) {
    for (const scopeSpans of sub(resourceSpans, 2)) {
      for (const span of sub(scopeSpans, 2)) {
        const one = (n) => sub(span, n)[0] ?? Buffer.alloc(0);
        spans.push({
          traceId: one(1).toString("hex"),
          spanId: one(2).toString("hex"),
          parentSpanId: one(4).toString("hex"),
          name: one(5).toString("utf8"),
        });
      }
    }
  }
}

before(async () => {
  receiver = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      if (req.method === "POST" && req.url === "/v1/traces") decode(Buffer.concat(chunks));
      res.writeHead(200, { "content-type": "application/x-protobuf" });
      res.end();
    });
  });
  await new Promise((ok) => receiver.listen(0, "127.0.0.1", ok));
  await stack.start();
  // The suite's origin, exporting its spans here.
  await stack.restartOrigin({
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${receiver.address().port}`,
    OTEL_BSP_SCHEDULE_DELAY: "100",
  });
});

after(async () => {
  await stack.stop();
  receiver?.close();
});

/** The origin's purchase request span carrying the request id `id` is found by its trace. */
async function requestSpan(pred, what) {
  for (let i = 0; i < 100; i++) {
    const found = spans.filter((s) => s.name === "POST /v1/purchases" && pred(s));
    if (found.length > 0) return found;
    await sleep(100);
  }
  assert.fail(`${what}: no origin request span; received ${JSON.stringify(spans)}\n${stack.logs()}`);
}

test("the shopper's traceparent reaches the origin's spans through the edge", async () => {
  const sku = unique("TRACE");
  await stack.putSku(sku, { stock: 10, maxPerUser: 10 });
  const user = unique("user");

  // The shopper's trace is continued: the origin's request span is the child of the shopper's span.
  const traceId = randomBytes(16).toString("hex");
  const shopperSpan = randomBytes(8).toString("hex");
  const r = await stack.purchase({
    token: tokenFor(user),
    key: unique("k"),
    body: { sku, qty: 1 },
    headers: { traceparent: `00-${traceId}-${shopperSpan}-01`, tracestate: "shop=1" },
  });
  assert.equal(r.status, 201, r.text);
  const [continued] = await requestSpan((s) => s.traceId === traceId, "continued trace");
  assert.equal(continued.parentSpanId, shopperSpan);
  // …and its batch, lease and commit spans are in the shopper's trace too.
  for (let i = 0; i < 50 && spans.filter((s) => s.traceId === traceId).length < 4; i++) await sleep(100);
  const names = spans.filter((s) => s.traceId === traceId).map((s) => s.name).sort();
  assert.deepEqual(names, ["POST /v1/purchases", "batch", "commit", "lease"]);

  // Without a traceparent, or with a malformed one, the edge starts a trace (never an error).
  const before = new Set(spans.map((s) => s.traceId));
  for (const headers of [{}, { traceparent: `00-${traceId.toUpperCase()}-${shopperSpan}-01` }]) {
    const r2 = await stack.purchase({ token: tokenFor(user), key: unique("k"), body: { sku, qty: 1 }, headers });
    assert.equal(r2.status, 201, r2.text);
  }
  const started = await requestSpan((s) => !before.has(s.traceId), "edge-started traces");
  for (let i = 0; i < 50 && spans.filter((s) => s.name === "POST /v1/purchases" && !before.has(s.traceId)).length < 2; i++) {
    await sleep(100);
  }
  const fresh = spans.filter((s) => s.name === "POST /v1/purchases" && !before.has(s.traceId));
  assert.equal(fresh.length, 2, JSON.stringify(fresh));
  for (const s of fresh) {
    assert.match(s.traceId, /^[0-9a-f]{32}$/);
    assert.notEqual(s.traceId, "0".repeat(32));
    assert.notEqual(s.traceId, traceId);
    // The edge's own parent id: the origin's span is not a root (the edge started the trace).
    assert.match(s.parentSpanId, /^[0-9a-f]{16}$/);
    assert.notEqual(s.parentSpanId, "0".repeat(16));
  }
  assert.notEqual(fresh[0].traceId, fresh[1].traceId);
  assert.ok(started.length > 0);
});
