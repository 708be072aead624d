// The documentation's shape: a short README whose first lines are the two commands of a
// fresh machine, every page of docs/ reachable from it, and every relative link between the
// pages (files and #anchors, GitHub's) landing somewhere. The commands on the pages run in
// test/readme.test.ts.
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, anchors, docPages, readDoc, relativeLinks, slug } from './markdown.js';

/** The pages whose links are checked: the README, docs/, and the results file they cite. */
const LINKED = [...docPages(), 'bench/RESULTS.md'];

describe('the README', () => {
  const readme = readDoc('README.md');

  it('opens with the two commands of a fresh machine, and stays short', () => {
    expect(readme.split('\n').slice(0, 5)).toEqual([
      '# ctxprobe',
      '',
      '```sh',
      expect.stringMatching(/^npm ci && npm start {5}# /),
      expect.stringMatching(/^npm ci && npm test {6}# /),
    ]);
    expect(readme.trimEnd().split('\n').length).toBeLessThanOrEqual(250);
  });

  it('links every page of docs/, and shows a figure that is there', () => {
    const linked = new Set(relativeLinks(readme).map((l) => l.target.split('#')[0]));
    for (const page of docPages().slice(1)) expect(linked, `README → ${page}`).toContain(page);
    const images = [...readme.matchAll(/!\[[^\]]*\]\(([^)]+)\)/g)].map((m) => m[1]!);
    expect(images.length).toBeGreaterThan(0);
    for (const image of images) {
      expect(image).toMatch(/^docs\/.+\.(svg|png)$/);
      expect(fs.statSync(path.join(ROOT, image)).size).toBeLessThan(200_000);
    }
  });
});

describe('links between pages', () => {
  it('slugs headings as GitHub does', () => {
    expect(slug('Llama-3-8B shape on the CPU, beside llama.cpp')).toBe('llama-3-8b-shape-on-the-cpu-beside-llamacpp');
    expect(slug("`skip_heatmap` and the prefix cache")).toBe('skip_heatmap-and-the-prefix-cache');
    expect(slug('`/v1/completions` for scoring')).toBe('v1completions-for-scoring');
    expect(slug("npm's warnings")).toBe('npms-warnings');
    expect(slug('GPU: H100')).toBe('gpu-h100');
    expect([...anchors('# A\n## B\n```sh\n# not a heading\n```\n## B\n')]).toEqual(['a', 'b', 'b-1']);
  });

  it.each(LINKED)('%s: every relative link reaches a file, and its #anchor a heading there', (page) => {
    const text = readDoc(page);
    const broken: string[] = [];
    for (const { target, line } of relativeLinks(text)) {
      const [file, anchor] = target.split('#') as [string, string | undefined];
      const resolved = file === '' ? page : path.normalize(path.join(path.dirname(page), decodeURI(file)));
      if (resolved.startsWith('..') || !fs.existsSync(path.join(ROOT, resolved))) {
        broken.push(`${page}:${line}: ${target} (no ${resolved})`);
        continue;
      }
      if (anchor !== undefined) {
        if (!resolved.endsWith('.md')) broken.push(`${page}:${line}: ${target} (an anchor into a file that is not markdown)`);
        else if (!anchors(readDoc(resolved)).has(anchor)) broken.push(`${page}:${line}: ${target} (no heading #${anchor} in ${resolved})`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('deployment links to scale-out', () => {
    expect(relativeLinks(readDoc('docs/deployment.md')).map((l) => l.target)).toContain('scale-out.md');
  });
});
