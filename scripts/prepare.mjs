// npm's `prepare` step (package.json): `npm run build`, unless dist/ is newer than every
// file it is built from. npm runs `prepare` after `npm ci`, and also when `npx ctxprobe`
// runs in this checkout: npm exec installs the checkout into its own cache as a link to
// run the bin, and runs the link's `prepare` there with its output hidden — a full tsc
// build (~45 s on 2 cores) before the first `npx ctxprobe` of a clone said anything, for a
// dist/ that `npm ci` had just built. A build that is needed says so before it starts.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
// Written last by the build (scripts/build-assets.mjs): a build that failed part-way leaves it older.
const stamp = path.join(root, 'dist/openapi.json');
// What tsc compiles (tsconfig.build.json's include), the viewer's files (under src/), and
// what decides how: the configs, the build scripts, the dependencies.
const { include } = JSON.parse(fs.readFileSync(path.join(root, 'tsconfig.build.json'), 'utf8'));
const inputs = [...include, 'tsconfig.json', 'tsconfig.build.json', 'package.json', 'package-lock.json', 'scripts/build-assets.mjs'];

/** The newest modification time of a file or of any file under a folder (0 if absent). */
function newest(file) {
  const stat = fs.statSync(file, { throwIfNoEntry: false });
  if (!stat) return 0;
  if (!stat.isDirectory()) return stat.mtimeMs;
  return fs.readdirSync(file).reduce((m, name) => Math.max(m, newest(path.join(file, name))), 0);
}

const built = newest(stamp);
const sources = Math.max(...inputs.map((p) => newest(path.join(root, p))));
if (built > 0 && built >= sources) {
  process.stderr.write('ctxprobe: dist/ is newer than its sources, not rebuilt (npm run build rebuilds it)\n');
} else {
  process.stderr.write(
    `ctxprobe: building dist/ (npm run build: tsc, about half a minute)${built ? ': sources changed since the last build' : ''}\n`,
  );
  const run = spawnSync('npm', ['run', 'build'], { cwd: root, stdio: 'inherit' });
  process.exit(run.status ?? 1);
}
