"use strict";
// The sale page's proof-of-work solver, a dedicated Web Worker (GET /sale-worker.js): a small
// driver around ALTCHA's own v1 solver, altcha-lib's `solveChallenge` (tries number = start,
// start + 1, … until the lowercase hex SHA-256 of salt + number, by WebCrypto, is the challenge).
// The page hands it a slice of the numbers, `start..=end`; it solves the slice in chunks of
// `chunk` numbers and, after each chunk, posts how many it has tried, so the page can show
// progress; at the end it posts the number, or null when the slice holds none. The hashing is
// all here: the page's main thread stays free for the shopper.
//
// In:  { algorithm, challenge, salt, start, end, chunk }
// Out: { tried } after each chunk, then { tried, done: true, number }
//
// Bundled with the pinned altcha-lib into worker.js (which the edge embeds and serves) by
// `bash scripts/sale-worker-bundle.sh`: edit this file, then regenerate; never edit the bundle.
import { solveChallenge } from "altcha-lib/v1";

onmessage = async (event) => {
  const { algorithm, challenge, salt, start, end, chunk } = event.data;
  const whole = (n) => Number.isSafeInteger(n) && n >= 0;
  if (!whole(start) || !whole(end) || !whole(chunk) || chunk < 1) {
    postMessage({ tried: 0, done: true, number: null });
    return;
  }
  for (let from = start; from <= end; from += chunk) {
    const to = Math.min(end, from + chunk - 1);
    const found = await solveChallenge(challenge, salt, algorithm, to, from).promise;
    if (found) {
      postMessage({ tried: found.number - start + 1, done: true, number: found.number });
      return;
    }
    postMessage({ tried: to - start + 1 });
  }
  postMessage({ tried: Math.max(0, end - start + 1), done: true, number: null });
};
