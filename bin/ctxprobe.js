#!/usr/bin/env node
// Runs the compiled CLI (dist/, built by `npm run build`, which `npm ci` runs as the
// `prepare` step). For development without a build: `npx tsx src/cli/main.ts …`.
// `serve` runs as a child of this process, which relays its stderr as JSON lines: native
// libraries write there too, raw (src/cli/stderr-json.ts).
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';

const cli = new URL('../dist/src/cli/main.js', import.meta.url);
if (!fs.existsSync(cli)) {
  process.stderr.write('ctxprobe: dist/ is missing: run `npm run build` (npm ci runs it)\n');
  process.exit(1);
}
const stderrJson = () => import(new URL('../dist/src/cli/stderr-json.js', import.meta.url).href);
if (process.argv[2] === 'serve' && !process.env.CTXPROBE_SUPERVISED) {
  (await stderrJson()).superviseServe(fileURLToPath(import.meta.url), process.argv.slice(2));
} else {
  if (process.env.CTXPROBE_SUPERVISED) (await stderrJson()).followSupervisor();
  await import(cli.href);
}
