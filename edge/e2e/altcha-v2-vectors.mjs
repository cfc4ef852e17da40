// Prints the ALTCHA proof-of-work v2 vectors of edge/src/proof/tests_v2.rs, made by `altcha-lib`
// (the pinned 2.8.0 in package.json, its default export: v2) exactly as a shop's server or the
// `altcha` widget would make them: `node edge/e2e/altcha-v2-vectors.mjs`.
//
// 1. A challenge made by `createChallenge` in deterministic mode (a known `counter`), signed and
//    key-signed with the vector secret, bound like the edge binds its own (`data`, `expiresAt`):
//    the edge's `altcha_v2::make` with the same nonce, salt and counter must give it byte for byte.
// 2. Its solution by altcha-lib's `solveChallenge`, as the widget submits it:
//    `btoa(JSON.stringify({challenge: {parameters, signature}, solution}))`.
// 3. The same for a join of another SKU by another shopper, without `issued`.
import { createChallenge, solveChallenge, verifySolution } from "altcha-lib";
import { deriveKey } from "altcha-lib/algorithms/pbkdf2";

const KEY = "altcha-vector-secret-0123456789";

async function vector(counter, cost, data) {
  const challenge = await createChallenge({
    algorithm: "PBKDF2/SHA-256",
    cost,
    counter,
    data,
    deriveKey,
    expiresAt: 1_800_000_000,
    hmacKeySignatureSecret: KEY,
    hmacSignatureSecret: KEY,
  });
  const solution = await solveChallenge({ challenge, deriveKey });
  const check = await verifySolution({
    challenge,
    deriveKey,
    hmacKeySignatureSecret: KEY,
    hmacSignatureSecret: KEY,
    solution,
  });
  if (!check.verified || solution.counter !== counter) {
    throw new Error(`altcha-lib does not verify its own vector: ${JSON.stringify(check)}`);
  }
  delete solution.time; // varies run to run; the widget adds it, the edge ignores it
  const payload = Buffer.from(
    JSON.stringify({
      challenge: { parameters: challenge.parameters, signature: challenge.signature },
      solution: { ...solution, time: 12.3 },
    }),
  ).toString("base64");
  return { challenge: JSON.stringify(challenge), payload };
}

const purchase = await vector(77, 64, {
  issued: 1_799_999_877, // 1 800 000 000 − 120 − 3: the TTL and the slowest solve at 16 bits
  kid: "default",
  purpose: "purchase",
  sku: "SHOE-1",
  user: "alice@shop:42",
});
const join = await vector(3, 1, {
  kid: "default",
  purpose: "join",
  sku: "DROP.2026_x-1",
  user: "bob",
});
console.log(JSON.stringify({ purchase, join }, null, 2));
