#!/usr/bin/env python3
"""What scripts/check-containers.sh does as a shopper, a shop backend and an operator, against the
running compose stack's published ports (standard library only).

  shopper.py shop --origin URL --edge URL --sku SKU
      PUT the SKU through the admin API, mint a session token (HS256, as a shop backend does;
      SESSION_SECRET), buy one through the edge, send the same Idempotency-Key again.
  shopper.py sale --origin URL --edge URL --sku SKU --shoppers N --during CMD [--signed-to URL]
      (--origin: where the admin API is called: the SKU, the orders' check)
      N shoppers buy one unit each (8 at a time) through the edge, or signed as the edge signs
      (EDGE_SHARED_SECRET, docs/signing.md v2) straight to --signed-to; CMD runs once a third
      have been answered. A request that got no answer is retried with the same key through the
      edge (which the other origin serves). The last third of the shoppers buy after CMD is done. Every 201 must be an order the origin has (admin
      GET /v1/orders/{id}), and the units sold must equal the orders answered.
  shopper.py prometheus --prometheus URL --expect-up T,... [--expect-down T,...]
      Prometheus's /api/v1/targets shows those scrape targets up (down), and an origin metric
      is read through /api/v1/query.
  shopper.py dashboard-queries FILE
      Every query of a Grafana dashboard, URL-encoded, Grafana's variables substituted.

Secrets come from the environment (ADMIN_TOKEN, SESSION_SECRET, EDGE_SHARED_SECRET) and are
never printed.
"""

import argparse
import base64
import concurrent.futures
import hashlib
import hmac
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid


def say(msg):
    print(f"[check-containers]   ok   {msg}", file=sys.stderr, flush=True)


def fail(msg):
    print(f"[check-containers]   FAIL {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def http(method, url, body=None, headers=None, timeout=15):
    """(status, headers, parsed JSON body or text); status 0 when no answer came."""
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, hdrs, raw = r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        status, hdrs, raw = e.code, dict(e.headers), e.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
        return 0, {}, str(e)
    try:
        return status, hdrs, json.loads(raw)
    except ValueError:
        return status, hdrs, raw.decode(errors="replace")


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def mint_token(sub, ttl=3600):
    """An HS256 session token, as edge/examples/mint-token.rs mints it (sub, iat, exp)."""
    now = int(time.time())
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = b64url(json.dumps({"sub": sub, "iat": now, "exp": now + ttl}, separators=(",", ":")).encode())
    signing_input = f"{header}.{claims}".encode()
    sig = hmac.new(os.environ["SESSION_SECRET"].encode(), signing_input, hashlib.sha256).digest()
    return f"{header}.{claims}.{b64url(sig)}"


def netstring(s):
    b = s.encode()
    return f"{len(b)}:".encode() + b + b","


def edge_signature(user, key, body):
    """Flashgate-Signature v2 with key id `default` (EDGE_SHARED_SECRET), docs/signing.md."""
    t = str(int(time.time()))
    fields = ["flashgate-signature-v2", t, "default", "POST", "/v1/purchases", user, key,
              hashlib.sha256(body).hexdigest()]
    mac = hmac.new(os.environ["EDGE_SHARED_SECRET"].encode(), b"".join(map(netstring, fields)),
                   hashlib.sha256).hexdigest()
    return f"t={t},kid=default,v2={mac}"


def admin(method, url, body=None):
    return http(method, url, body, {"Authorization": f"Bearer {os.environ['ADMIN_TOKEN']}"})


def put_sku(origin, sku, stock, max_per_user):
    status, _, sku_view = admin("PUT", f"{origin}/v1/admin/skus/{sku}",
                                {"name": f"Check {sku}", "price_cents": 1000, "stock": stock,
                                 "max_per_user": max_per_user})
    if status != 200:
        fail(f"PUT /v1/admin/skus/{sku} answered {status}: {sku_view}")
    return sku_view


def buy_through_edge(edge, token, sku, key):
    return http("POST", f"{edge}/v1/purchases", {"sku": sku, "qty": 1},
                {"Authorization": f"Bearer {token}", "Idempotency-Key": key})


def buy_signed(origin, user, sku, key):
    body = json.dumps({"sku": sku, "qty": 1}).encode()
    return http("POST", f"{origin}/v1/purchases", body,
                {"Flashgate-User": user, "Idempotency-Key": key,
                 "Flashgate-Signature": edge_signature(user, key, body)})


def wait_sku_on_sale(edge, sku, token):
    # A restock is on sale everywhere about a second after the PUT answers (docs/operations.md).
    for _ in range(40):
        status, _, view = http("GET", f"{edge}/v1/skus/{sku}", headers={"Authorization": f"Bearer {token}"})
        if status == 200 and isinstance(view, dict) and view.get("stock", 0) > 0:
            return view
        time.sleep(0.25)
    fail(f"GET {edge}/v1/skus/{sku} never showed the SKU in stock")


def cmd_shop(a):
    view = put_sku(a.origin, a.sku, 10, 2)
    say(f"PUT /v1/admin/skus/{a.sku} (admin API, origin-1): 200, stock {view.get('stock')}")
    user = f"shopper-{uuid.uuid4().hex[:12]}"
    token = mint_token(user)
    say(f"minted a session token for {user} (HS256 with SESSION_SECRET, as a shop backend does)")
    wait_sku_on_sale(a.edge, a.sku, token)
    key = f"check-{uuid.uuid4()}"
    status, hdrs, order = buy_through_edge(a.edge, token, a.sku, key)
    if status != 201 or not isinstance(order, dict) or order.get("sku") != a.sku:
        fail(f"POST {a.edge}/v1/purchases answered {status}: {order}")
    say(f"POST /v1/purchases through the edge container: 201, order {order['order_id']}, remaining {order.get('remaining')}")
    status2, hdrs2, again = buy_through_edge(a.edge, token, a.sku, key)
    replayed = {k.lower(): v for k, v in hdrs2.items()}.get("idempotent-replayed")
    if status2 != 201 or again != order or replayed != "true":
        fail(f"the same Idempotency-Key again answered {status2} (Idempotent-Replayed: {replayed}): {again}")
    say("the same Idempotency-Key again: 201, the same order, Idempotent-Replayed: true")
    status, _, stored = admin("GET", f"{a.origin}/v1/orders/{order['order_id']}")
    if status != 200 or stored.get("order_id") != order["order_id"]:
        fail(f"GET /v1/orders/{order['order_id']} answered {status}: {stored}")
    say(f"the origin has the order (GET /v1/orders/{{id}}: {stored.get('status')})")
    # The edge container holds its optional POW_SECRET: a SKU with a proof of work gets a
    # challenge (a 503 would mean the secret did not reach the worker).
    pow_sku = f"{a.sku}-POW"
    status, _, _ = admin("PUT", f"{a.origin}/v1/admin/skus/{pow_sku}",
                         {"name": "Check proof of work", "price_cents": 1000, "stock": 1,
                          "max_per_user": 1, "proof_of_work": {"min_bits": 4, "max_bits": 8}})
    if status != 200:
        fail(f"PUT /v1/admin/skus/{pow_sku} with a proof of work answered {status}")
    status, _, challenge = http("GET", f"{a.edge}/v1/challenge?sku={pow_sku}",
                                headers={"Authorization": f"Bearer {token}"})
    if status != 200 or not isinstance(challenge, dict) or challenge.get("algorithm") != "SHA-256":
        fail(f"GET /v1/challenge?sku={pow_sku} answered {status}: {challenge}")
    say(f"GET /v1/challenge through the edge container: 200, an ALTCHA challenge of maxnumber {challenge['maxnumber']}")


def cmd_sale(a):
    put_sku(a.origin, a.sku, a.shoppers, 1)
    probe = mint_token("probe")
    wait_sku_on_sale(a.edge, a.sku, probe)
    answered = 0
    lock = threading.Lock()
    started = threading.Event()
    during = {}

    def run_during():
        t0 = time.monotonic()
        r = subprocess.run(a.during, shell=True, capture_output=True, text=True)
        during.update(rc=r.returncode, secs=time.monotonic() - t0, out=(r.stdout + r.stderr).strip())

    finished = threading.Event()

    def run_during_then_mark():
        try:
            run_during()
        finally:
            finished.set()

    runner = threading.Thread(target=run_during_then_mark)

    def shop(i):
        nonlocal answered
        if i >= 2 * a.shoppers // 3:
            # The last third buys once the command has done its work: truly after the break.
            finished.wait(timeout=90)
        user = f"sale-{a.sku.lower()}-{i}-{uuid.uuid4().hex[:6]}"
        key = f"k-{uuid.uuid4()}"
        if a.signed_to:
            first = buy_signed(a.signed_to, user, a.sku, key)
        else:
            first = buy_through_edge(a.edge, mint_token(user), a.sku, key)
        with lock:
            answered += 1
            if answered >= a.shoppers // 3 and not started.is_set():
                started.set()
                runner.start()
        final = first
        retried = False
        if first[0] in (0, 502, 503, 504):
            # No decision came back: the client retries the same key (through the edge).
            retried = True
            for _ in range(20):
                time.sleep(0.5)
                final = buy_through_edge(a.edge, mint_token(user), a.sku, key)
                if final[0] not in (0, 502, 503, 504):
                    break
        return user, key, first, final, retried

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(shop, range(a.shoppers)))
    if runner.is_alive() or runner.ident is not None:
        runner.join()
    secs = time.monotonic() - t0
    if not during:
        fail(f"the sale ended before `{a.during}` ran")
    if during["rc"] != 0:
        fail(f"`{a.during}` exited {during['rc']}: {during['out']}")
    if a.stop_log:
        with open(a.stop_log, "w") as f:
            f.write(f"`{a.during}` took {during['secs']:.1f} s")

    first_codes, final_codes = {}, {}
    for _, _, first, final, _ in results:
        first_codes[first[0]] = first_codes.get(first[0], 0) + 1
        final_codes[final[0]] = final_codes.get(final[0], 0) + 1
    retried = sum(1 for r in results if r[4])
    say(f"{a.shoppers} shoppers in {secs:.1f} s, `{a.during}` ran after a third (took {during['secs']:.1f} s); "
        f"first answers {dict(sorted(first_codes.items()))}, {retried} retried with the same key through the edge, "
        f"final {dict(sorted(final_codes.items()))}")
    bad = [(u, f[0], f[2]) for u, _, _, f, _ in results if f[0] != 201]
    if bad:
        fail(f"{len(bad)} shoppers did not get their unit, e.g. {bad[:3]}")
    orders = {}
    for user, key, first, final, _ in results:
        if first[0] == 201 and final[2] != first[2]:
            fail(f"{user}: the retry answered another order than the first 201: {first[2]} vs {final[2]}")
        orders[final[2]["order_id"]] = user
    if len(orders) != a.shoppers:
        fail(f"{a.shoppers} shoppers, {len(orders)} distinct orders")
    missing = []
    for oid in orders:
        status, _, stored = admin("GET", f"{a.origin}/v1/orders/{oid}")
        if status != 200:
            missing.append((oid, status))
    if missing:
        fail(f"{len(missing)} orders answered 201 are not in the books: {missing[:3]}")
    status, _, view = http("GET", f"{a.origin}/v1/skus/{a.sku}")
    if status != 200 or view.get("stock") != 0:
        fail(f"after {a.shoppers} orders of {a.shoppers} units, GET /v1/skus/{a.sku}: {status} {view}")
    say(f"every shopper got exactly one unit: {len(orders)} orders, all in the books, stock now 0")


def cmd_prometheus(a):
    want = {t: "up" for t in (a.expect_up or "").split(",") if t}
    want.update({t: "down" for t in (a.expect_down or "").split(",") if t})
    deadline = time.monotonic() + 45
    while True:
        status, _, doc = http("GET", f"{a.prometheus}/api/v1/targets")
        seen = {}
        if status == 200:
            for t in doc["data"]["activeTargets"]:
                seen[t["labels"].get("instance")] = t["health"]
        if all(seen.get(t) == h for t, h in want.items()):
            break
        if time.monotonic() > deadline:
            fail(f"Prometheus targets {seen}, want {want}")
        time.sleep(1)
    say("Prometheus /api/v1/targets: " + ", ".join(f"{t} {h}" for t, h in sorted(seen.items())))
    q = urllib.parse.quote("sum by (instance) (origin_purchases_total)")
    status, _, doc = http("GET", f"{a.prometheus}/api/v1/query?query={q}")
    if status != 200 or doc.get("status") != "success" or not doc["data"]["result"]:
        fail(f"origin_purchases_total through /api/v1/query: {status} {doc}")
    say("origin_purchases_total through Prometheus's API: " +
        ", ".join(f"{r['metric'].get('instance')} {r['value'][1]}" for r in doc["data"]["result"]))


def cmd_dashboard_queries(a):
    with open(a.file, encoding="utf-8") as f:
        dash = json.load(f)
    exprs = []

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "expr" and isinstance(v, str):
                    exprs.append(v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(dash.get("panels", []))
    subst = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h", "$instance": ".*"}
    for e in exprs:
        for k, v in subst.items():
            e = e.replace(k, v)
        print(urllib.parse.quote(e, safe=""))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("shop")
    s.add_argument("--origin", required=True)
    s.add_argument("--edge", required=True)
    s.add_argument("--sku", required=True)
    s = sub.add_parser("sale")
    s.add_argument("--origin", required=True)
    s.add_argument("--edge", required=True)
    s.add_argument("--sku", required=True)
    s.add_argument("--shoppers", type=int, required=True)
    s.add_argument("--during", required=True)
    s.add_argument("--signed-to")
    s.add_argument("--stop-log")
    s = sub.add_parser("prometheus")
    s.add_argument("--prometheus", required=True)
    s.add_argument("--expect-up")
    s.add_argument("--expect-down")
    s = sub.add_parser("dashboard-queries")
    s.add_argument("file")
    a = p.parse_args()
    {"shop": cmd_shop, "sale": cmd_sale, "prometheus": cmd_prometheus,
     "dashboard-queries": cmd_dashboard_queries}[a.cmd](a)


if __name__ == "__main__":
    main()
