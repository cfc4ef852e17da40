"use strict";
// The Flashgate sale page. One click = one purchase intent: its Idempotency-Key is kept in
// sessionStorage until the answer is final, so a double click, a retry or a reload mid-request
// resumes the same intent and can never buy twice. 429/503 are retried with the same key after
// Retry-After. Times are the edge's: the browser's clock is corrected by the Date header.
// A sale with a waiting room: the page joins the line when it opens, shows the place and the
// estimated wait, polls at the edge's hint, and once admitted keeps the pass in sessionStorage
// and sends it with every purchase (Flashgate-Pass). Buy stays off until the shopper's turn.
// A sale with a proof of work: each purchase (or, with a waiting room, the join) first solves a
// fresh ALTCHA challenge in a Web Worker (/sale-worker.js, altcha-lib's own solver), with its
// progress shown; the main thread never hashes. A refused proof gets a fresh challenge (at most
// twice per intent); a shop's bound for the shopper's network is said in words, with the time.
(() => {
  const $ = (id) => document.getElementById(id);
  const ui = { name: $("name"), price: $("price"), stock: $("stock"), cap: $("cap"), countdown: $("countdown"), line: $("line"), buy: $("buy"), check: $("check"), checkText: $("check-text"), checkBar: $("check-bar"), wait: $("wait"), result: $("result") };
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
  let heldUntil = 0;        // edge time before which a kept intent may not be sent (network bound)
  let checking = "";        // "purchase" or "join" while a proof of work is being solved
  let powLearned = false;   // a 428 said the sale asks for a proof before the view did

  const money = (cents) => (cents / 100).toFixed(2);
  const clock = (ms) => {
    const s = Math.ceil(ms / 1000), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    const two = (n) => String(n).padStart(2, "0");
    return (h ? h + ":" + two(m) : String(m)) + ":" + two(r);
  };
  const localMs = (edgeMs) => edgeMs - (edgeNow() - Date.now());
  const atMs = (edgeMs) => new Date(localMs(edgeMs)).toLocaleTimeString();
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
    else if (soldOutLine() || (view.stock <= 0 && !(room && readPass()))) text = "Sold out.";
    else { text = "On sale now."; open = true; }
    if (ui.countdown.textContent !== text) ui.countdown.textContent = text;
    ui.countdown.dataset.open = String(open);
    const pass = room ? readPass() : null;
    if (admitted && !pass) { admitted = false; queueStep(); } // the turn ran out: back to the line
    showLine(pass);
    if (heldUntil && now >= heldUntil) {
      // The network's window is over: the kept intent may go again (on the shopper's click).
      heldUntil = 0;
      if (ui.result.dataset.state === "network_limit") say("You can try again now.", "", "network_retry");
    }
    ui.buy.disabled = !open || pending !== null || (room !== null && !pass) || heldUntil > 0;
  }

  // ---- The proof of work ---------------------------------------------------------------------

  // A sale whose view has `proof_of_work` asks for a solved challenge with each purchase (no
  // room) or with the join (a room: the pass then buys without one). GET /v1/challenge gives an
  // ALTCHA challenge bound to this SKU, this shopper and that purpose; a Web Worker running the
  // edge's /sale-worker.js (altcha-lib's v1 solver and a small driver) finds the number, so the
  // main thread stays free; the solution goes in Flashgate-Proof as the ALTCHA widget sends it:
  // base64 of the JSON payload. A proof is spent by the attempt it is sent with (whatever the
  // answer), so every attempt solves a fresh challenge. One worker: WebCrypto's digests of
  // several workers did not run any faster here (docs/sale-page.md, measured in headless Chromium).
  const SOLVER = "/sale-worker.js";
  let solverUrl = null;     // SOLVER as the TrustedScriptURL `new Worker` needs (one policy, made once)
  const proofWanted = () => powLearned || !!(view && view.proof_of_work);

  // The page's CSP requires Trusted Types and allows one policy, this one: it lets the solver's
  // URL, and nothing else, become a script URL.
  const solverScript = () => {
    if (solverUrl === null) {
      solverUrl = window.trustedTypes
        ? window.trustedTypes.createPolicy("flashgate-worker", {
          createScriptURL: (url) => { if (url !== SOLVER) throw new TypeError("not the solver"); return url; },
        }).createScriptURL(SOLVER)
        : SOLVER;
    }
    return solverUrl;
  };

  const showCheck = (fraction) => {
    const percent = Math.max(0, Math.min(100, Math.floor(fraction * 100)));
    const text = "Checking your browser… " + percent + " %";
    ui.check.hidden = false;
    if (ui.checkText.textContent !== text) { ui.checkText.textContent = text; ui.checkBar.value = percent; }
  };

  // Solves challenge `c` in a worker: numbers 0..=maxnumber in chunks (about 100 progress
  // reports, each between 64 and 1024 numbers), `progress(fraction tried)` after each. Resolves
  // to { number, hashes, ms } (number null when none matched); rejects when the worker cannot run.
  function solve(c, progress) {
    return new Promise((resolve, reject) => {
      const total = c.maxnumber + 1;
      const chunk = Math.max(64, Math.min(1024, Math.ceil(total / 100)));
      const started = performance.now();
      let worker;
      try { worker = new Worker(solverScript()); } catch (e) { reject(e); return; }
      worker.onmessage = (event) => {
        const m = event.data || {};
        if (!m.done) return progress(m.tried / total);
        worker.terminate();
        resolve({ number: typeof m.number === "number" ? m.number : null, hashes: m.tried, ms: performance.now() - started, started });
      };
      worker.onerror = (event) => { event.preventDefault(); worker.terminate(); reject(new Error("the solver did not run")); };
      worker.postMessage({ algorithm: c.algorithm, challenge: c.challenge, salt: c.salt, start: 0, end: c.maxnumber, chunk });
    });
  }

  // An answer the page makes itself when the solver could not find or run (handled like the
  // edge's answers, by code).
  const solverFailed = () => ({ res: { status: 0, headers: new Headers() }, json: { code: "solver_failed" } });

  // A fresh proof for this shopper's next `purpose` ("purchase" or "join"): { proof } (the
  // Flashgate-Proof value), { none: true } when the edge asks for none after all, or { answer }:
  // the challenge's refusal (401, 429, 503, …) or solverFailed(), to be handled like the
  // request's own answer. Throws when offline. Each solve is recorded as a User Timing measure
  // ("flashgate-proof": how long, how hard, how many hashes), visible in the browser's tools.
  async function getProof(purpose) {
    const { res, json } = await call("GET", "/v1/challenge?sku=" + encodeURIComponent(sku), {});
    if (json.code === "proof_not_required") {
      powLearned = false;
      if (view) view.proof_of_work = null;
      return { none: true };
    }
    if (res.status !== 200 || typeof json.challenge !== "string" || typeof json.salt !== "string" || !Number.isSafeInteger(json.maxnumber) || json.maxnumber < 1) {
      return { answer: { res, json } };
    }
    checking = purpose;
    showCheck(0);
    tick();
    let solved = null;
    try {
      solved = await solve(json, showCheck);
    } catch {
      solved = null;
    } finally {
      checking = "";
      ui.check.hidden = true;
    }
    if (!solved || solved.number === null) return { answer: solverFailed() };
    try {
      performance.measure("flashgate-proof", {
        start: solved.started, duration: solved.ms,
        detail: { purpose, maxnumber: json.maxnumber, bits: Math.log2(json.maxnumber), number: solved.number, hashes: solved.hashes },
      });
    } catch { /* an older browser without User Timing Level 3: no record */ }
    const payload = { algorithm: json.algorithm, challenge: json.challenge, number: solved.number, salt: json.salt, signature: json.signature, took: Math.round(solved.ms) };
    return { proof: btoa(JSON.stringify(payload)) };
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

  // The line says no unit remains (phase "sold_out"): nothing is offered, whatever a cached view says.
  const soldOutLine = () => room !== null && line !== null && line.phase === "sold_out";

  function showLine(pass) {
    ui.line.hidden = room === null;
    let text = "", st = "";
    if (room === null) { /* no line */ }
    else if (pass) { text = "It is your turn: buy before " + atMs(pass.until) + "."; st = "admitted"; }
    else if (closed) { st = "closed"; }
    else if (checking === "join") { text = "Checking your browser before you join the line…"; st = "checking"; }
    else if (!line) { text = "Joining the line…"; st = "joining"; }
    else if (line.phase === "expired") { text = "Your turn to buy has ended."; st = "expired"; }
    else if (line.phase === "sold_out") {
      // Issue 36: the room knows the stock; nothing to buy, and whether units may come back.
      text = line.may_return
        ? "Sold out for now. Units held by other shoppers may come back: you keep your place (number " + line.position + ") and are let in, in order, if they do."
        : "Sold out: nothing is left to buy.";
      st = line.may_return ? "sold_out_may_return" : "sold_out";
    }
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
      let { res, json } = joined ? await call("GET", path, receipt ? { "flashgate-queue-receipt": receipt } : {}) : await join(path);
      if (json.code === "not_in_queue") { joined = false; receipt = ""; ({ res, json } = await join(path)); }
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
        else if (json.phase === "sold_out") next = hinted ? next : 2; // the edge's hint: a return is seen at once
        else if (!json.admitted) next = Math.min(next, Math.max(1, json.estimated_wait_secs || 0));
      } else if (json.code === "no_waiting_room") {
        room = null; line = null; joined = false; receipt = "";
      } else if (json.code === "unauthenticated") {
        say("Please sign in again: your session is missing or has expired.", "bad", "unauthenticated");
        next = 0;
      } else if (json.code === "proof_required" || json.code === "proof_rejected" || json.code === "solver_failed") {
        // Fresh challenges did not help (see join): try again later, gently.
        say("The check of your browser did not succeed, so you are not in line yet. Trying again shortly.", "bad", json.code);
        next = 15;
      } else if (json.code === "network_limit" && seconds(res) > 5) {
        const until = edgeNow() + seconds(res) * 1000;
        say("The shop's limit for shoppers from your network has been reached. You can join the line after " + when(until) + ".", "bad", "network_limit");
        next = seconds(res);
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

  // Joins (POST). With a proof of work, a join challenge is solved first (its progress shown);
  // a 428 or 403 on the join gets a fresh challenge, at most twice. The last answer.
  async function join(path) {
    for (let fresh = 0; ; fresh += 1) {
      const headers = {};
      if (proofWanted()) {
        const got = await getProof("join");
        if (got.answer) return got.answer;
        if (got.proof) headers["flashgate-proof"] = got.proof;
      }
      const answer = await call("POST", path, headers);
      const code = answer.json.code;
      if (code === "proof_required") powLearned = true;
      if ((code === "proof_required" || code === "proof_rejected") && fresh < 2) continue;
      return answer;
    }
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
  // Retry-After of a network bound, whose window may be longer than an hour (at most a week).
  const seconds = (res) => Math.max(1, Math.min(604800, parseInt(res.headers.get("retry-after") || "1", 10) || 1));
  // "14:05:10 (in about 59 minutes)"; hours from 90 minutes on; a day and a time when it is
  // more than 12 hours away.
  const when = (edgeMs) => {
    const secs = Math.max(0, Math.round((edgeMs - edgeNow()) / 1000));
    const local = new Date(localMs(edgeMs));
    const span = secs < 5400 ? minutes(secs) : "about " + Math.round(secs / 3600) + " hours";
    return (secs > 43200 ? local.toLocaleString() : local.toLocaleTimeString()) + " (in " + span + ")";
  };
  const networkWords = (until) => "The shop's limit for purchases from your network has been reached. Try again after " + when(until) + ".";

  const finish = (text, kind, state, close) => {
    sessionStorage.removeItem(INTENT);
    pending = null;
    ui.wait.textContent = "";
    if (close) closed = text;
    say(text, kind, state);
    tick();
  };

  // Ends this attempt but keeps the intent, its key, for the shopper's next click (or a reload):
  // nothing was bought by it, but an earlier attempt with the key may have been, and only the
  // same key can never buy twice. Before `until` (edge ms) Buy stays off and a reload waits.
  const keep = (intent, text, kind, state, until) => {
    sessionStorage.setItem(INTENT, JSON.stringify({ key: intent.key, qty: intent.qty, until: until || 0 }));
    pending = null;
    heldUntil = until || 0;
    ui.wait.textContent = "";
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
    let answer = null;
    try {
      if (room === null && proofWanted()) {
        // A fresh proof for this attempt (the button stays off meanwhile); a refusal of the
        // challenge itself (429, 503, 401…) is answered below like the purchase's own.
        say("Checking your browser…", "", "checking");
        const got = await getProof("purchase");
        if (got.proof) headers["flashgate-proof"] = got.proof;
        if (got.answer) answer = got.answer;
      }
      if (answer === null) {
        say("Buying…", "", "pending");
        answer = await call("POST", "/v1/purchases", headers, JSON.stringify({ sku, qty: intent.qty }));
      }
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
    if (code === "network_limit") {
      // The shop's bound for the shopper's network (an IPv4 /24: everyone behind one office or
      // mobile gateway). A moment (another purchase from the network being decided): again, same
      // key. Longer: the time in words; the intent is kept for a click after it.
      if (seconds(res) <= 5) {
        say("Still trying…", "", "waiting");
        return showWait(seconds(res), "Busy on your network: retrying in", () => send(intent));
      }
      return keep(intent, networkWords(edgeNow() + seconds(res) * 1000), "bad", "network_limit", edgeNow() + seconds(res) * 1000);
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
      case "proof_required":
        // The sale asks for a proof of work the view did not show yet (switched on after the
        // page read it): solve one and send again, once. Never stored with the key.
        powLearned = true;
        intent.required = (intent.required || 0) + 1;
        if (intent.required <= 1) return send(intent);
        return keep(intent, "The check of your browser did not succeed. Please try again.", "bad", "proof_required");
      case "proof_rejected":
        // Refused (expired while the page waited, or already spent): a fresh challenge, at most
        // twice per intent. Never stored with the key, never forwarded: nothing was bought.
        intent.rejected = (intent.rejected || 0) + 1;
        if (intent.rejected <= 2) return send(intent);
        return keep(intent, "The check of your browser did not succeed. Please try again.", "bad", "proof_rejected");
      case "solver_failed":
        return keep(intent, "Your browser could not complete the check. Please try again, or use another browser.", "bad", "solver_failed");
      default: return finish("Something went wrong (" + (code || res.status) + "). Please try again.", "bad", "error", false);
    }
  }

  const newKey = () => {
    if (crypto.randomUUID) return crypto.randomUUID();
    const b = crypto.getRandomValues(new Uint8Array(16));
    return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  };

  const savedIntent = () => {
    let saved = null;
    try { saved = JSON.parse(sessionStorage.getItem(INTENT) || "null"); } catch { saved = null; }
    return saved && typeof saved.key === "string" ? { key: saved.key, qty: saved.qty || 1, until: saved.until || 0 } : null;
  };

  ui.buy.addEventListener("click", () => {
    if (pending !== null || ui.buy.disabled) return; // one intent at a time
    // A kept intent (see keep) goes again with its key; otherwise a new one.
    const kept = savedIntent();
    const intent = kept ? { key: kept.key, qty: kept.qty } : { key: newKey(), qty: 1 };
    sessionStorage.setItem(INTENT, JSON.stringify(intent));
    send(intent);
  });

  (async () => {
    await loadView();
    setInterval(tick, 250);
    setInterval(loadView, 15000);
    const saved = savedIntent();
    if (saved && saved.until > edgeNow()) {
      // Kept by a network bound: said again, sent on a click after the time.
      heldUntil = saved.until;
      say(networkWords(saved.until), "bad", "network_limit");
      tick();
    } else if (saved) {
      say("Resuming your purchase…", "", "pending");
      send({ key: saved.key, qty: saved.qty });
    }
  })();
})();
