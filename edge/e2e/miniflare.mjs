// Runs the BUILT worker in workerd through Miniflare alone: the same runtime, wasm, Durable
// Objects (SQLite) and Cache API emulation as `wrangler dev`, without wrangler's proxy workerd in
// front of it and without the DevTools inspector (which `wrangler dev` always enables, and which
// streams every subrequest's events to wrangler's node process). A deployed worker has neither,
// so the edge benchmark (bench/edge/cost.mjs --runtimes miniflare) measures the worker's own CPU
// this way beside `wrangler dev`'s.
//
//   node edge/e2e/miniflare.mjs --build edge/build --port 8787 --persist DIR --vars '{"ORIGIN_URL":"…"}'
//
// The worker's options come from the build's wrangler.toml (the [build]-less copy) through
// wrangler's own conversion (`unstable_getMiniflareWorkerOptions`: its [vars], Durable Object
// bindings and SQLite classes, module rules, compatibility date), so they are the ones
// `wrangler dev` gives Miniflare. --vars overrides and extends [vars], as `wrangler dev --var`.
import { join, resolve } from "node:path";
import { Miniflare } from "miniflare";
import { unstable_getMiniflareWorkerOptions } from "wrangler";

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? fallback : process.argv[i + 1];
}

const build = resolve(option("build", "edge/build"));
const port = Number(option("port", "8787"));
const persist = option("persist", undefined);
const overrides = JSON.parse(option("vars", "{}"));

const { workerOptions, main } = unstable_getMiniflareWorkerOptions(join(build, "wrangler.toml"));
const mf = new Miniflare({
  ...workerOptions,
  modules: true,
  scriptPath: main,
  modulesRoot: build,
  bindings: { ...workerOptions.bindings, ...overrides },
  host: "127.0.0.1",
  port,
  ...(persist ? { defaultPersistRoot: persist } : {}),
});
await mf.ready;
console.log(`miniflare: worker ${build} on http://127.0.0.1:${port}`);

const stop = async () => {
  await mf.dispose();
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
