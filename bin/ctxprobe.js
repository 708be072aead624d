#!/usr/bin/env node
// Runs the compiled CLI (dist/, built by `npm run build`, which `npm ci` runs as the
// `prepare` step). For development without a build: `npx tsx src/cli/main.ts …`.
import fs from 'node:fs';

const cli = new URL('../dist/src/cli/main.js', import.meta.url);
if (!fs.existsSync(cli)) {
  process.stderr.write('ctxprobe: dist/ is missing: run `npm run build` (npm ci runs it)\n');
  process.exit(1);
}
await import(cli.href);
