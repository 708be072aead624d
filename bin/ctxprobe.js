#!/usr/bin/env node
// Runs the compiled CLI (dist/, built by `npm run build`, which `npm ci` runs as the
// `prepare` step). For development without a build: `npx tsx src/cli.ts …`.
import fs from 'node:fs';

// onnxruntime-node 1.30 crashes (SIGSEGV) creating a session when any process argument
// is ~14,400 characters or more (measured here; a bare require is fine): refuse first.
const LONGEST_ARGUMENT = 8192;
const long = process.argv.slice(2).find((a) => a.length > LONGEST_ARGUMENT);
if (long !== undefined) {
  process.stderr.write(
    `ctxprobe: an argument of ${long.length} characters: onnxruntime-node crashes on process arguments ` +
      `of ~14,000 characters or more, so arguments are limited to ${LONGEST_ARGUMENT}. Pass long texts ` +
      'from files: --context @FILE (or - for standard input), --continuation @FILE, --rolling @FILE, --chunk label=@FILE\n',
  );
  process.exit(2);
}

const cli = new URL('../dist/src/cli.js', import.meta.url);
if (!fs.existsSync(cli)) {
  process.stderr.write('ctxprobe: dist/ is missing: run `npm run build` (npm ci runs it)\n');
  process.exit(1);
}
await import(cli.href);
