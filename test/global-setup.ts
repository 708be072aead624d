// Every temporary folder of a test run in one, removed when the run ends: fixtures,
// repositories, generated checkpoints and the servers the tests start (they inherit
// TMPDIR) all make theirs under os.tmpdir(). One `npm test` left ~200 ctxprobe-* folders
// (57 MB) in /tmp before. The weights cache (XDG_CACHE_HOME) goes there too.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export default function setup(): () => void {
  const previous = { TMPDIR: process.env.TMPDIR, XDG_CACHE_HOME: process.env.XDG_CACHE_HOME };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxprobe-test-run-'));
  process.env.TMPDIR = dir;
  process.env.XDG_CACHE_HOME = path.join(dir, 'cache');
  return () => {
    for (const [key, value] of Object.entries(previous)) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
}
