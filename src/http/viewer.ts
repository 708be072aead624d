// The viewer page (/ui/) and the API's OpenAPI document (/openapi.json): files only, no
// data, so no token (the page's own API calls carry the token its user enters). The
// page's script is TypeScript (src/http/ui/app.ts, compiled with the server into dist/);
// its static files and the OpenAPI document are put beside it by the build
// (scripts/build-assets.mjs), so everything is served from dist/ as the images ship it;
// its plotting library, Observable Plot with d3, is served from the package so the page
// works on an air-gapped cluster.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import type { FastifyInstance } from 'fastify';
import { PACKAGE_ROOT } from '../common/paths.js';
import { openApiDocument } from './openapi.js';

const require = createRequire(import.meta.url);
const BUILT_DIR = path.join(PACKAGE_ROOT, 'dist/src');
const UI_DIR = path.join(BUILT_DIR, 'http/ui');

export const VIEWER_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data: blob:",
  "connect-src 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'none'",
].join('; ');

/** name → [file, content type] */
const FILES: Record<string, [string, string]> = {
  'index.html': [path.join(UI_DIR, 'index.html'), 'text/html; charset=utf-8'],
  'style.css': [path.join(UI_DIR, 'style.css'), 'text/css; charset=utf-8'],
  'favicon.svg': [path.join(UI_DIR, 'favicon.svg'), 'image/svg+xml'],
  // The page's modules, compiled from src/ by tsc, under their own relative paths (app.js
  // imports ./text-view.js, ../../eval/records.js, the runners' own reading of their data
  // lines, and ../../figures/charts.js, the CLI's own drawing code; text-view.js imports
  // ../../common/floats.js).
  'src/http/ui/app.js': [path.join(BUILT_DIR, 'http/ui/app.js'), 'text/javascript; charset=utf-8'],
  'src/http/ui/text-view.js': [path.join(BUILT_DIR, 'http/ui/text-view.js'), 'text/javascript; charset=utf-8'],
  'src/figures/charts.js': [path.join(BUILT_DIR, 'figures/charts.js'), 'text/javascript; charset=utf-8'],
  'src/eval/records.js': [path.join(BUILT_DIR, 'eval/records.js'), 'text/javascript; charset=utf-8'],
  'src/common/floats.js': [path.join(BUILT_DIR, 'common/floats.js'), 'text/javascript; charset=utf-8'],
  // The UMD builds (package "jsdelivr" entries): plain scripts that set window.d3 / window.Plot.
  'vendor/d3.min.js': [path.join(path.dirname(require.resolve('d3')), 'd3.min.js'), 'text/javascript; charset=utf-8'],
  'vendor/plot.umd.min.js': [
    path.join(path.dirname(require.resolve('@observablehq/plot')), '../dist/plot.umd.min.js'),
    'text/javascript; charset=utf-8',
  ],
};

/** `authRequired`: the page asks for a token before its first call (so it never draws a
 * 401 in the console just to learn that). */
export function registerViewer(app: FastifyInstance, authRequired: boolean): void {
  const open = { open: true };
  // The page is where its user types a token: no other site may frame it (clickjacking),
  // run script in it, or have its files sniffed as another type. Its scripts, styles and
  // calls are its own; Plot draws SVG with inline style attributes (style-src
  // 'unsafe-inline'); downloads are blob: URLs.
  app.addHook('onSend', async (req, reply) => {
    if (!/^\/(ui(\/|$)|favicon\.ico)/.test(req.url)) return;
    reply.header('content-security-policy', VIEWER_CSP);
    reply.header('x-content-type-options', 'nosniff');
    reply.header('x-frame-options', 'DENY');
    reply.header('referrer-policy', 'no-referrer');
  });
  // Built by `npm run build` (scripts/build-assets.mjs); a source checkout without a build
  // gets the same document computed now.
  const built = path.join(PACKAGE_ROOT, 'dist/openapi.json');
  let document: string | undefined;
  app.get('/openapi.json', { config: open }, async (_req, reply) => {
    document ??= fs.existsSync(built) ? fs.readFileSync(built, 'utf8') : JSON.stringify(openApiDocument(version()));
    return reply.type('application/json').send(document);
  });
  app.get('/ui', { config: open }, async (_req, reply) => reply.redirect('/ui/'));
  app.get('/favicon.ico', { config: open }, async (_req, reply) => send(reply, 'favicon.svg'));
  let page: string | undefined;
  app.get('/ui/', { config: open }, async (_req, reply) => {
    const file = FILES['index.html']![0];
    if (!fs.existsSync(file)) return reply.status(404).type('text/plain').send('the viewer is not built: npm run build');
    page ??= fs.readFileSync(file, 'utf8').replace('{{AUTH}}', authRequired ? 'required' : 'none');
    return reply.header('cache-control', 'no-cache').type('text/html; charset=utf-8').send(page);
  });
  app.get('/ui/*', { config: open }, async (req, reply) => send(reply, (req.params as { '*': string })['*']));
}

function send(reply: import('fastify').FastifyReply, name: string) {
  const file = Object.hasOwn(FILES, name) ? FILES[name] : undefined;
  if (!file || !fs.existsSync(file[0])) return reply.status(404).type('text/plain').send(`no file ${name}`);
  return reply.header('cache-control', 'no-cache').type(file[1]).send(fs.createReadStream(file[0]));
}

const version = () => (JSON.parse(fs.readFileSync(path.join(PACKAGE_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
