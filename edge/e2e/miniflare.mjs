// Runs the BUILT worker in workerd through Miniflare alone: the same runtime, wasm, Durable
// Objects (SQLite) and Cache API emulation as `wrangler dev`, without wrangler's proxy workerd in
// front of it and without the DevTools inspector (which `wrangler dev` always enables, and which
// streams every subrequest's events to wrangler's node process). A deployed worker has neither,
// so the edge benchmark (bench/edge/cost.mjs --runtime miniflare) measures the worker's own CPU
// this way beside `wrangler dev`'s.
//
//   node edge/e2e/miniflare.mjs --build edge/build --port 8787 --persist DIR --vars '{"ORIGIN_URL":"…"}'
//
// The bindings are read from the build's wrangler.toml (the [build]-less copy): its [vars], its
// Durable Object bindings and their SQLite classes (every class of this worker is one), its
// compatibility date. --vars overrides and extends [vars], as `wrangler dev --var` does.
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { Miniflare } from "miniflare";

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? fallback : process.argv[i + 1];
}

const build = resolve(option("build", "edge/build"));
const port = Number(option("port", "8787"));
const persist = option("persist", undefined);
const overrides = JSON.parse(option("vars", "{}"));

/** The few keys of the build's wrangler.toml this needs (it is written by scripts/edge-build.sh). */
function readConfig(text) {
  const config = { vars: {}, durableObjects: {}, sqliteClasses: new Set() };
  let section = "";
  let binding = null;
  for (const raw of text.split("\n")) {
    const line = raw.replace(/#.*$/, "").trim();
    if (!line) continue;
    const header = line.match(/^\[\[?([^\]]+)\]\]?$/);
    if (header) {
      section = header[1];
      binding = section === "durable_objects.bindings" ? {} : null;
      continue;
    }
    const kv = line.match(/^([A-Za-z0-9_]+)\s*=\s*(.+)$/);
    if (!kv) continue;
    const [, key, value] = kv;
    if (section === "" && key === "compatibility_date") config.compatibilityDate = JSON.parse(value);
    else if (section === "vars") config.vars[key] = JSON.parse(value);
    else if (binding && (key === "name" || key === "class_name")) {
      binding[key] = JSON.parse(value);
      if (binding.name && binding.class_name) config.durableObjects[binding.name] = binding.class_name;
    } else if (section === "migrations" && key === "new_sqlite_classes") {
      for (const c of JSON.parse(value)) config.sqliteClasses.add(c);
    }
  }
  return config;
}

const config = readConfig(readFileSync(join(build, "wrangler.toml"), "utf8"));
const mf = new Miniflare({
  modules: true,
  scriptPath: join(build, "index.js"),
  modulesRoot: build,
  modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"], fallthrough: true }],
  compatibilityDate: config.compatibilityDate,
  bindings: { ...config.vars, ...overrides },
  durableObjects: Object.fromEntries(
    Object.entries(config.durableObjects).map(([name, className]) => [
      name,
      { className, useSQLite: config.sqliteClasses.has(className) },
    ]),
  ),
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
