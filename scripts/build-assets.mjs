// What `npm run build` adds to tsc's output (package.json "build"): the OpenAPI document
// of the HTTP/JSON API (dist/openapi.json, from the same function the server would call)
// and the viewer page's static files beside its compiled script (dist/src/http/ui/), so
// a runtime that ships dist/ alone — the Docker images — serves /openapi.json and /ui/.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const { openApiDocument } = await import(path.join(root, 'dist/src/http/openapi.js'));
const { version } = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
fs.writeFileSync(path.join(root, 'dist/openapi.json'), `${JSON.stringify(openApiDocument(version), null, 1)}\n`);

const ui = path.join(root, 'src/http/ui');
const out = path.join(root, 'dist/src/http/ui');
fs.mkdirSync(out, { recursive: true });
for (const file of fs.readdirSync(ui).filter((f) => !f.endsWith('.ts'))) fs.copyFileSync(path.join(ui, file), path.join(out, file));
