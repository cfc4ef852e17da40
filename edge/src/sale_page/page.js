"use strict";
// The Flashgate sale page. One click = one purchase intent: its Idempotency-Key is kept in
// sessionStorage until the answer is final, so a double click, a retry or a reload mid-request
// resumes the same intent and can never buy twice. 429/503 are retried with the same key after
// Retry-After. Times are the edge's: the browser's clock is corrected by the Date header.
// A sale with a waiting room: the page joins the line when it opens, shows the place and the
// estimated wait, polls at the edge's hint, and once admitted keeps the pass in sessionStorage
// and sends it with every purchase (Flashgate-Pass). Buy stays off until the shopper's turn.
(() => {
  const $ = (id) => document.getElementById(id);
  const ui = { name: $("name"), price: $("price"), stock: $("stock"), cap: $("cap"), countdown: $("countdown"), line: $("line"), buy: $("buy"), wait: $("wait"), result: $("result") };
  const sku = decodeURIComponent(location.pathname.split("/").pop() || "");
  const INTENT = "flashgate.intent." + sku;
  const PASS = "flashgate.pass." + sku;
  const TOKEN = "flashgate.token";

  // Local demos only: a token in the URL fragment (never sent to a server) becomes a Bearer
  // header; it is kept for this tab and removed from the address bar.
  const fragment = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (fragment) {
    sessionStorage.setItem(TOKEN, decodeURIComponent(fragment[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  const token = sessionStorage.getItem(TOKEN);

  // The edge's clock: each answer's Date (whole seconds) bounds offset = edge - browser to
  // [date - received, date + 1000 - sent]; the bounds of every answer are intersected.
  let lo = -Infinity, hi = Infinity;
  const learnClock = (res, sent, received) => {
    const date = Date.parse(res.headers.get("date") || "");
    if (Number.isNaN(date)) return;
    const l = date - received, h = date + 1000 - sent;
    if (Math.max(lo, l) > Math.min(hi, h)) { lo = l; hi = h; } else { lo = Math.max(lo, l); hi = Math.min(hi, h); }
  };
  const edgeNow = () => Date.now() + (Number.isFinite(lo) ? (lo + hi) / 2 : 0);

  const call = async (method, path, extra, body) => {
    const headers = Object.assign({ "x-flashgate-csrf": "1" }, extra);
    if (token) headers.authorization = "Bearer " + token;
    const sent = Date.now();
    const res = await fetch(path, { method, headers, body, cache: "no-store", credentials: "same-origin" });
    learnClock(res, sent, Date.now());
    let json = null;
    try { json = await res.json(); } catch { json = null; }
    return { res, json: json || {} };
  };

  let view = null;          // the SKU view
  let closed = "";          // a final state that ends the sale for this shopper (words)
  let pausedUntil = 0;      // edge time until which a 409 sale_paused keeps the button off
  let pending = null;       // the intent being decided
  let waitTimer = 0;
  let room = null;          // the view's waiting_room, when the sale has one
  let line = null;          // the last place in line: { position, admitted, estimated_wait_secs }
  let joined = false;       // this page joined (then it polls with GET)
  let receipt = "";         // the join receipt: sent back with each poll, the edge answers it alone
  let queueTimer = 0, queueBusy = false, admitted = false;
  let parked = null;        // an intent that waits for the shopper's turn (resumed without a pass)

  const money = (cents) => (cents / 100).toFixed(2);
  const clock = (ms) => {
    const s = Math.ceil(ms / 1000), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    const two = (n) => String(n).padStart(2, "0");
    return (h ? h + ":" + two(m) : String(m)) + ":" + two(r);
  };
  const atMs = (edgeMs) => new Date(edgeMs - (edgeNow() - Date.now())).toLocaleTimeString();
  const at = (iso) => atMs(Date.parse(iso));
  const say = (text, kind, state) => {
    ui.result.textContent = text;
    ui.result.className = "result " + (kind || "");
    ui.result.dataset.state = state || "";
  };

  function render() {
    if (!view) return;
    ui.name.textContent = view.name;
    document.title = view.name + " — flash sale";
    ui.price.textContent = money(view.price_cents);
    ui.stock.textContent = String(Math.max(0, view.stock));
    ui.cap.textContent = String(view.max_per_user);
  }

  // Runs every 250 ms: the countdown and whether Buy is enabled.
  function tick() {
    if (!view) return;
    const now = edgeNow();
    const starts = view.starts_at ? Date.parse(view.starts_at) : NaN;
    const ends = view.ends_at ? Date.parse(view.ends_at) : NaN;
    let text = "", open = false;
    if (closed) text = closed;
    else if (now >= ends) { text = "The sale has ended."; closed = text; }
    else if (view.paused || now < pausedUntil) text = "The sale is paused.";
    else if (now < starts) text = "Starts in " + clock(starts - now);
    else if (view.stock <= 0) text = "Sold out.";
    else { text = "On sale now."; open = true; }
    if (ui.countdown.textContent !== text) ui.countdown.textContent = text;
    ui.countdown.dataset.open = String(open);
    const pass = room ? readPass() : null;
    if (admitted && !pass) { admitted = false; queueStep(); } // the turn ran out: back to the line
    showLine(pass);
    ui.buy.disabled = !open || pending !== null || (room !== null && !pass);
  }

  // ---- The waiting room ----------------------------------------------------------------------

  // The pass and until when it is usable (edge time, ms), or null. Expired passes are dropped.
  function readPass() {
    let p = null;
    try { p = JSON.parse(sessionStorage.getItem(PASS) || "null"); } catch { p = null; }
    if (p && typeof p.pass === "string" && p.until > edgeNow()) return p;
    if (p) sessionStorage.removeItem(PASS);
    return null;
  }
  // Usable until `pass_expires_at` (else `pass_secs` from now), on the edge's clock.
  const keepPass = (pass, expiresAt) => {
    const old = readPass();
    if (old && old.pass === pass) return;
    const secs = room && room.pass_secs > 0 ? room.pass_secs : 60;
    const until = Date.parse(expiresAt || "") || edgeNow() + secs * 1000;
    sessionStorage.setItem(PASS, JSON.stringify({ pass, until }));
  };
  const minutes = (secs) => secs < 60 ? "less than a minute" : secs < 90 ? "about 1 minute" : "about " + Math.round(secs / 60) + " minutes";

  function showLine(pass) {
    ui.line.hidden = room === null;
    let text = "", st = "";
    if (room === null) { /* no line */ }
    else if (pass) { text = "It is your turn: buy before " + atMs(pass.until) + "."; st = "admitted"; }
    else if (closed) { st = "closed"; }
    else if (!line) { text = "Joining the line…"; st = "joining"; }
    else if (line.phase === "expired") { text = "Your turn to buy has ended."; st = "expired"; }
    else if (view.starts_at && edgeNow() < Date.parse(view.starts_at)) {
      text = "You are in line. At the start, everyone who joined before it gets a place drawn at random.";
      st = "prequeue";
    } else {
      text = "You are number " + line.position + " in line. Estimated wait: " + minutes(line.estimated_wait_secs) + ".";
      st = "waiting";
    }
    if (ui.line.textContent !== text) ui.line.textContent = text;
    ui.line.dataset.state = st;
  }

  // Joins (the first time, and whenever the edge no longer knows this shopper) or polls; then
  // schedules the next poll at the edge's hint (Retry-After, else 5 s; sooner when the estimate
  // or the start is nearer). Admitted: no polling until the pass runs out.
  async function queueStep() {
    clearTimeout(queueTimer);
    if (room === null || closed || queueBusy) return;
    queueBusy = true;
    let next = 5;
    const path = "/v1/queue/" + encodeURIComponent(sku);
    try {
      let { res, json } = await call(joined ? "GET" : "POST", path, joined && receipt ? { "flashgate-queue-receipt": receipt } : {});
      if (json.code === "not_in_queue") { joined = false; receipt = ""; ({ res, json } = await call("POST", path, {})); }
      const hinted = res.headers.get("retry-after");
      next = hinted ? retryAfter(res) : 5;
      if (res.status === 200 && typeof json.position === "number") {
        joined = true;
        line = json;
        if (typeof json.receipt === "string") receipt = json.receipt;
        if (json.phase === "expired") {
          // The turn was had and is over: nothing to wait for; a parked intent ends here.
          next = 0;
          if (parked) { parked = null; finish("Your turn to buy has ended.", "bad", "expired", false); }
        }
        if (json.admitted && typeof json.pass === "string") {
          keepPass(json.pass, json.pass_expires_at);
          if (!admitted) {
            admitted = true;
            if (pending === null && parked === null && !closed) say("It is your turn: you can buy now.", "ok", "admitted");
          }
        }
        const starts = view.starts_at ? Date.parse(view.starts_at) - edgeNow() : 0;
        if (starts > 0) next = Math.min(next, starts / 1000 + Math.random() * 2);
        else if (!json.admitted) next = Math.min(next, Math.max(1, json.estimated_wait_secs || 0));
      } else if (json.code === "no_waiting_room") {
        room = null; line = null; joined = false; receipt = "";
      } else if (json.code === "unauthenticated") {
        say("Please sign in again: your session is missing or has expired.", "bad", "unauthenticated");
        next = 0;
      } else if (res.status !== 429 && res.status !== 503) {
        next = 15; // something unexpected: try again later, gently
      }
    } catch {
      next = 3; // offline
    }
    queueBusy = false;
    const pass = room ? readPass() : null;
    if (pass && parked) { const intent = parked; parked = null; send(intent); }
    if (pass) next = Math.max(1, (pass.until - edgeNow()) / 1000 + 0.5);
    if (room !== null && next > 0 && !closed) queueTimer = setTimeout(queueStep, next * 1000);
    tick();
  }

  // The view says whether the sale has a room (it may be switched on or off during the sale).
  function syncRoom() {
    const r = view && view.waiting_room ? view.waiting_room : null;
    const had = room !== null;
    if (!r && had && room.learned) return; // a 403 not_admitted knows better than a cached view
    room = r;
    if (r && !had) queueStep();
    if (!r && had) { clearTimeout(queueTimer); line = null; joined = false; receipt = ""; admitted = false; }
  }

  async function loadView() {
    try {
      const { res, json } = await call("GET", "/v1/skus/" + encodeURIComponent(sku), {});
      if (res.status === 200) { view = json; render(); syncRoom(); }
      else if (res.status === 404 || res.status === 400) { closed = "There is no sale for this item."; ui.name.textContent = "No such sale"; view = view || { stock: 0 }; }
    } catch { /* offline: keep what we have; the next poll tries again */ }
    tick();
  }

  const showWait = (secs, words, then) => {
    clearInterval(waitTimer);
    let left = secs;
    const show = () => { ui.wait.textContent = words + " " + left + " s."; };
    show();
    waitTimer = setInterval(() => {
      left -= 1;
      if (left > 0) return show();
      clearInterval(waitTimer);
      ui.wait.textContent = "";
      then();
    }, 1000);
  };

  const retryAfter = (res) => Math.max(1, Math.min(3600, parseInt(res.headers.get("retry-after") || "1", 10) || 1));

  const finish = (text, kind, state, close) => {
    sessionStorage.removeItem(INTENT);
    pending = null;
    ui.wait.textContent = "";
    if (close) closed = text;
    say(text, kind, state);
    tick();
  };

  async function send(intent) {
    pending = intent;
    const headers = { "content-type": "application/json", "idempotency-key": intent.key };
    if (room !== null) {
      const pass = readPass();
      if (!pass) {
        // Resumed after the turn ran out: the intent waits for the next pass, same key.
        pending = null;
        parked = intent;
        say("Your purchase will be sent when it is your turn.", "", "waiting");
        return queueStep();
      }
      headers["flashgate-pass"] = pass.pass;
    }
    tick();
    say("Buying…", "", "pending");
    let answer;
    try {
      answer = await call("POST", "/v1/purchases", headers, JSON.stringify({ sku, qty: intent.qty }));
    } catch {
      return showWait(2, "Connection lost. Retrying in", () => send(intent));
    }
    const { res, json } = answer;
    const code = json.code || "";
    if (res.status === 201) {
      if (view && typeof json.remaining === "number") { view.stock = json.remaining; render(); }
      const order = json.order_id ? " Order " + json.order_id + "." : "";
      if (json.status === "held" && json.expires_at) {
        return finish("Bought! Your unit is held until " + at(json.expires_at) + ": pay before then." + order, "ok", "held", false);
      }
      return finish("Bought!" + order, "ok", "bought", false);
    }
    if (res.status === 429 || res.status === 503) {
      const words = res.status === 429 ? "Too many attempts: retrying in" : "The sale is busy: retrying in";
      say("Still trying…", "", "waiting");
      return showWait(retryAfter(res), words, () => send(intent));
    }
    if (code === "idempotency_in_flight") {
      say("Your purchase is being processed…", "", "waiting");
      return showWait(1, "Checking again in", () => send(intent));
    }
    switch (code) {
      case "sold_out": if (view) { view.stock = 0; render(); } return finish("Sold out: no units are left.", "bad", "sold_out", true);
      case "purchase_limit": return finish("Limit reached: you already bought the most this sale allows per shopper" + (view ? " (" + view.max_per_user + ")." : "."), "bad", "purchase_limit", true);
      case "not_started":
        if (view && json.starts_at) view.starts_at = json.starts_at;
        // Clicked at the very start (the edge opens a safety margin after it): the same key is
        // sent again when the edge says. Further off, the start moved: the intent ends here.
        if (retryAfter(res) <= 10) {
          say("The sale has not started yet.", "", "waiting");
          return showWait(retryAfter(res), "Sending your purchase at the start, in", () => send(intent));
        }
        return finish("The sale has not started yet. Buy opens at the start.", "bad", "not_started", false);
      case "sale_ended": return finish("The sale has ended.", "bad", "sale_ended", true);
      case "not_admitted": {
        // Never forwarded: nothing was bought. Back to the line (the edge says where).
        sessionStorage.removeItem(PASS);
        admitted = false;
        if (typeof json.position === "number") line = { position: json.position, admitted: false, estimated_wait_secs: line ? line.estimated_wait_secs : 0 };
        const place = typeof json.position === "number" ? " You are number " + json.position + " in line." : "";
        finish("Not your turn yet: you can buy once you are admitted from the line." + place, "bad", "not_admitted", false);
        clearTimeout(queueTimer);
        if (room === null) {
          // The room was switched on after this page read the view: join now, learn its settings.
          room = { pass_secs: 0, learned: true };
          queueStep();
          loadView();
        } else queueTimer = setTimeout(queueStep, retryAfter(res) * 1000);
        return;
      }
      case "sale_paused":
        pausedUntil = edgeNow() + retryAfter(res) * 1000;
        setTimeout(loadView, retryAfter(res) * 1000 + 50);
        return finish("The sale is paused. Try again in a moment.", "bad", "sale_paused", false);
      case "unauthenticated": return finish("Please sign in again: your session is missing or has expired.", "bad", "unauthenticated", false);
      case "csrf_rejected": return finish("This request was refused for your security. Reload the page.", "bad", "csrf_rejected", false);
      case "unknown_sku": return finish("There is no sale for this item.", "bad", "unknown_sku", true);
      default: return finish("Something went wrong (" + (code || res.status) + "). Please try again.", "bad", "error", false);
    }
  }

  const newKey = () => {
    if (crypto.randomUUID) return crypto.randomUUID();
    const b = crypto.getRandomValues(new Uint8Array(16));
    return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  };

  ui.buy.addEventListener("click", () => {
    if (pending !== null || ui.buy.disabled) return; // one intent at a time
    const intent = { key: newKey(), qty: 1 };
    sessionStorage.setItem(INTENT, JSON.stringify(intent));
    send(intent);
  });

  (async () => {
    await loadView();
    setInterval(tick, 250);
    setInterval(loadView, 15000);
    let saved = null;
    try { saved = JSON.parse(sessionStorage.getItem(INTENT) || "null"); } catch { saved = null; }
    if (saved && typeof saved.key === "string") {
      say("Resuming your purchase…", "", "pending");
      send({ key: saved.key, qty: saved.qty || 1 });
    }
  })();
})();
