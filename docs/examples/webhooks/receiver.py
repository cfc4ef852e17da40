"""A Flashgate webhook receiver in Python, with the Standard Webhooks reference library.

    pip install standardwebhooks==1.3.0
    WEBHOOK_SECRET=whsec_... python3 receiver.py [PORT] [EVENTS_FILE]

It listens on 127.0.0.1:PORT (8000) for POSTs (put it behind your HTTPS proxy and register
https://your.host/... with POST /v1/admin/webhooks) and does what every Flashgate receiver must:

1. Verify the signature on the raw body, exactly as received (`Webhook.verify`), and refuse the
   request (400) when it does not verify: it was not sent by your Flashgate.
2. Deduplicate on `webhook-id` (the event's `id`): deliveries are at least once — a retry after a
   timeout, a replay, a crash of the sender can bring the same event again.
3. Apply each order's events in `data.sequence` order. Flashgate never sends an order's event n+1
   before you acknowledged n, so they arrive in order; an event whose sequence you already passed
   is a redelivery: acknowledge it and ignore it.
4. Answer 2xx quickly (within WEBHOOK_TIMEOUT_MS, 15 s by default) and do slow work elsewhere.

Here the "work" appends each new event as one JSON line to EVENTS_FILE (standard output when
absent), and the seen ids and sequences live in memory; a real receiver keeps them in its database,
in the same transaction as the work.
"""

import http.server
import json
import os
import sys
import threading

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

webhook = Webhook(os.environ["WEBHOOK_SECRET"])
port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
out = open(sys.argv[2], "a", encoding="utf-8") if len(sys.argv) > 2 else sys.stdout

lock = threading.Lock()
seen_ids = set()
applied = {}  # order id -> the last sequence applied


def apply(event):
    data = event["data"]
    if event["type"].startswith("order."):
        if data["sequence"] <= applied.get(data["order_id"], 0):
            return  # already applied: a redelivery
        applied[data["order_id"]] = data["sequence"]
    out.write(json.dumps(event) + "\n")
    out.flush()


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            event = webhook.verify(body, dict(self.headers))
        except WebhookVerificationError as e:
            self.send_response(400)
            self.end_headers()
            self.wfile.write(str(e).encode())
            return
        with lock:
            if event["id"] not in seen_ids:
                seen_ids.add(event["id"])
                apply(event)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Receiver)
    print(f"listening on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    server.serve_forever()
