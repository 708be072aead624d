// Every temporary folder of a test run in one, removed when the run ends: fixtures,
// repositories, generated checkpoints and the servers the tests start (they inherit
// TMPDIR) all make theirs under os.tmpdir(). One `npm test` left ~200 ctxprobe-* folders
// (57 MB) in /tmp before.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export default function setup(): () => void {
  const previous = process.env.TMPDIR;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxprobe-test-run-'));
  process.env.TMPDIR = dir;
  return () => {
    if (previous === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = previous;
    fs.rmSync(dir, { recursive: true, force: true });
  };
}
