// Generate TypeScript types for proto/ with @grpc/proto-loader's proto-loader-gen-types,
// into src/api/generated (committed). `--check` regenerates into a temporary folder and
// exits 1 if the committed types differ (the test suite runs it).
//
// The generator writes extensionless relative imports; NodeNext resolution wants `.js`.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const committed = path.join(root, 'src/api/generated');
const check = process.argv.includes('--check');
const out = check ? fs.mkdtempSync(path.join(os.tmpdir(), 'ctxprobe-proto-')) : committed;

if (!check) fs.rmSync(out, { recursive: true, force: true });
execFileSync(
  path.join(root, 'node_modules/.bin/proto-loader-gen-types'),
  [
    '--longs=Number',
    '--enums=String',
    '--defaults',
    '--oneofs',
    '--includeComments',
    '--grpcLib=@grpc/grpc-js',
    '-I',
    path.join(root, 'proto'),
    '-O',
    out,
    'ctxprobe/v1/ctxprobe.proto',
  ],
  { stdio: 'inherit' },
);

const files = (dir) =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(path.join(dir, e.name)) : [path.join(dir, e.name)]));
for (const file of files(out)) {
  const text = fs.readFileSync(file, 'utf8').replace(/(from '\.{1,2}\/[^']+?)(?<!\.js)'/g, "$1.js'");
  fs.writeFileSync(
    file,
    text.replace(
      /^\/\/ Original file: .*$/m,
      '// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.',
    ),
  );
}

if (check) {
  const rel = (dir) =>
    files(dir)
      .map((f) => path.relative(dir, f))
      .sort();
  const want = rel(out);
  const have = fs.existsSync(committed) ? rel(committed) : [];
  const stale =
    want.join('\n') !== have.join('\n') ||
    want.some((f) => fs.readFileSync(path.join(out, f), 'utf8') !== fs.readFileSync(path.join(committed, f), 'utf8'));
  fs.rmSync(out, { recursive: true, force: true });
  if (stale) {
    console.error('src/api/generated is out of date with proto/: run npm run proto:types');
    process.exit(1);
  }
}
