// The README's figure (docs/img/probe.svg): `ctxprobe probe` on the small default model,
// its argmax votes per layer and its round heatmap side by side in one SVG — the CLI's own
// figures (src/figures/charts.ts, the viewer's drawing code), nested unchanged. The default
// model has random weights: the figure shows what a probe gives, not a finding.
//   npm run build && node scripts/readme-figure.mjs [out.svg]
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const out = path.resolve(process.argv[2] ?? path.join(root, 'docs/img/probe.svg'));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxprobe-figure-'));
try {
  execFileSync(
    process.execPath,
    [
      path.join(root, 'bin/ctxprobe.js'),
      'probe',
      '--chunk',
      'instruction=Answer from the knowledge only.',
      'history= User: Who designed the tower?',
      "knowledge= Knowledge: Gustave Eiffel's company built it in 1889.",
      "response= Bot: Gustave Eiffel's company.",
      '--exclude',
      '0',
      '--svg',
      path.join(dir, 'fig'),
    ],
    { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, MALLOC_MMAP_THRESHOLD_: '1048576' } },
  );
  const parts = ['fig-votes.svg', 'fig-heatmap-0.svg'].map((f) => fs.readFileSync(path.join(dir, f), 'utf8'));
  const size = (svg) => {
    const [, w, h] = /viewBox="0 0 ([\d.]+) ([\d.]+)"/.exec(svg);
    return [Number(w), Number(h)];
  };
  // The bar chart is drawn 648 wide for any number of layers; the default model's 4 bars
  // and legend end before 440, so its viewport is cut there (a nested svg clips).
  parts[0] = parts[0].replace(/viewBox="0 0 [\d.]+ ([\d.]+)" height="([\d.]+)" width="[\d.]+"/, 'viewBox="0 0 440 $1" height="$2" width="440"');
  const gap = 24;
  let x = 0;
  const placed = parts.map((svg) => {
    const [w] = size(svg);
    const at = svg.replace(/^<svg /, `<svg x="${x}" y="0" `);
    x += w + gap;
    return at;
  });
  const width = x - gap;
  const height = Math.max(...parts.map((svg) => size(svg)[1]));
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(
    out,
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}">` +
      `<rect width="100%" height="100%" fill="white"/>${placed.join('')}</svg>\n`,
  );
  console.log(`wrote ${path.relative(process.cwd(), out)} (${width} × ${height})`);
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
