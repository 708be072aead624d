// Where the package's own files are (proto/, models/), whether this code runs from src/
// through tsx or compiled from dist/src/.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

function packageRoot(): string {
  for (let dir = path.dirname(fileURLToPath(import.meta.url)); ; dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, 'package.json')) && fs.existsSync(path.join(dir, 'proto'))) return dir;
    if (path.dirname(dir) === dir) throw new Error('ctxprobe: cannot find the package folder (package.json beside proto/)');
  }
}

export const PACKAGE_ROOT = packageRoot();
