// Puts the console's one third-party script into the Python package, from node_modules:
//
//   node_modules/htmx.org/dist/htmx.min.js  -> x402srv/admin/static/vendor/htmx.min.js
//   node_modules/htmx.org/LICENSE           -> x402srv/admin/static/vendor/htmx.LICENSE
//
// htmx's version is pinned by package-lock.json. The output is not committed (it is not our
// code): `./run` builds it before the tests and `./run serve`, and the package build
// (scripts/build_backend.py) before a wheel or an sdist, so a seller's install needs no Node.
//
// Usage: npm run build:console   (node scripts/build-console.mjs)

import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const SOURCE = join(ROOT, "node_modules", "htmx.org");
const OUT = join(ROOT, "x402srv", "admin", "static", "vendor");

if (!existsSync(join(SOURCE, "dist", "htmx.min.js"))) {
  console.error("build-console: htmx.org is not installed; run 'npm ci' in " + ROOT);
  process.exit(1);
}
const { version } = JSON.parse(readFileSync(join(SOURCE, "package.json"), "utf8"));
mkdirSync(OUT, { recursive: true });
copyFileSync(join(SOURCE, "dist", "htmx.min.js"), join(OUT, "htmx.min.js"));
copyFileSync(join(SOURCE, "LICENSE"), join(OUT, "htmx.LICENSE"));
writeFileSync(join(OUT, "VERSION"), `htmx.org ${version}\n`);
console.log(`build-console: htmx ${version} -> ${OUT}`);
