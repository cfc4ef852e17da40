// A Flashgate webhook receiver in Node.js (20+), with the Standard Webhooks reference library.
//
//     npm install standardwebhooks@1.3.0
//     WEBHOOK_SECRET=whsec_... node receiver.mjs [PORT] [EVENTS_FILE]
//
// It listens on 127.0.0.1:PORT (8000) for POSTs (put it behind your HTTPS proxy and register
// https://your.host/... with POST /v1/admin/webhooks) and does what every Flashgate receiver must:
//
// 1. Verify the signature on the raw body, exactly as received (`Webhook#verify`), and refuse the
//    request (400) when it does not verify: it was not sent by your Flashgate.
// 2. Deduplicate on `webhook-id` (the event's `id`): deliveries are at least once — a retry after
//    a timeout, a replay, a crash of the sender can bring the same event again.
// 3. Apply each order's events in `data.sequence` order. Flashgate never sends an order's event
//    n+1 before you acknowledged n, so they arrive in order; an event whose sequence you already
//    passed is a redelivery: acknowledge it and ignore it.
// 4. Answer 2xx quickly (within WEBHOOK_TIMEOUT_MS, 15 s by default) and do slow work elsewhere.
//
// Here the "work" appends each new event as one JSON line to EVENTS_FILE (standard output when
// absent), and the seen ids and sequences live in memory; a real receiver keeps them in its
// database, in the same transaction as the work.

import { appendFileSync } from "node:fs";
import { createServer } from "node:http";
import { Webhook } from "standardwebhooks";

const webhook = new Webhook(process.env.WEBHOOK_SECRET);
const port = Number(process.argv[2] ?? 8000);
const eventsFile = process.argv[3];

const seenIds = new Set();
const applied = new Map(); // order id -> the last sequence applied

function apply(event) {
  const data = event.data;
  if (event.type.startsWith("order.")) {
    if (data.sequence <= (applied.get(data.order_id) ?? 0)) return; // a redelivery
    applied.set(data.order_id, data.sequence);
  }
  const line = JSON.stringify(event) + "\n";
  if (eventsFile) appendFileSync(eventsFile, line);
  else process.stdout.write(line);
}

createServer((req, res) => {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    let event;
    try {
      event = webhook.verify(body, req.headers);
    } catch (e) {
      res.writeHead(400).end(String(e.message));
      return;
    }
    if (!seenIds.has(event.id)) {
      seenIds.add(event.id);
      apply(event);
    }
    res.writeHead(204).end();
  });
}).listen(port, "127.0.0.1", () => console.error(`listening on 127.0.0.1:${port}`));
