// The sale page's solver (GET /sale-worker.js) is the committed bundle edge/src/sale_page/worker.js;
// it must be exactly what esbuild makes of the driver and the pinned altcha-lib, so that it cannot
// drift from ALTCHA's own solver. Regenerate it with: bash scripts/sale-worker-bundle.sh
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { test } from "node:test";

import { ROOT } from "../harness.mjs";

test("the committed solver bundle is a fresh esbuild bundle of the driver and the pinned altcha-lib", () => {
  const r = spawnSync("bash", ["scripts/sale-worker-bundle.sh", "--check"], { cwd: ROOT, encoding: "utf8" });
  assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
});
