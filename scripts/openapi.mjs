// Writes dist/openapi.json from the proto (npm run build runs it after tsc): the document
// /openapi.json serves. The same function the server would call, run once at build time.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const { openApiDocument } = await import(path.join(root, 'dist/src/http/openapi.js'));
const { version } = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
fs.writeFileSync(path.join(root, 'dist/openapi.json'), `${JSON.stringify(openApiDocument(version), null, 1)}\n`);
