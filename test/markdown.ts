// The documentation as the tests read it: the README and the pages of docs/ — their ```sh
// commands (run by test/readme.test.ts), their headings as GitHub anchors and their relative
// links (checked by test/docs.test.ts), the section under a heading (what other tests check
// against the code: the settings table, the notebook example).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** README.md, then every page of docs/, as paths relative to the repository root. */
export function docPages(): string[] {
  const docs = fs
    .readdirSync(path.join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `docs/${f}`);
  return ['README.md', ...docs];
}

export function readDoc(page: string): string {
  return fs.readFileSync(path.join(ROOT, page), 'utf8');
}

/** The commands of a page's ```sh blocks (indented ones too, as in a list), continuation
 * lines joined, comments dropped. */
export function shCommands(text: string): string[] {
  const commands: string[] = [];
  for (const block of text.matchAll(/^([ \t]*)```sh\n([\s\S]*?)^[ \t]*```/gm)) {
    const indent = block[1]!.length;
    const body = block[2]!
      .split('\n')
      .map((l) => l.slice(Math.min(indent, l.length - l.trimStart().length)))
      .join('\n');
    const joined = body.replace(/\\\n\s*/g, '');
    for (const line of joined.split('\n')) {
      const command = line.replace(/\s+#.*$/, '').trim();
      if (command) commands.push(command);
    }
  }
  return commands;
}

/** The text with fenced code blocks blanked (line count kept), so that neither headings
 * nor links are read from code. */
export function withoutCodeBlocks(text: string): string {
  return text.replace(/^([ \t]*)(```|~~~)[^\n]*\n[\s\S]*?^[ \t]*\2[^\n]*$/gm, (m) => m.replace(/[^\n]/g, ''));
}

/** GitHub's anchor for a heading's text: inline markup gone, lower case, punctuation but
 * `-` and `_` dropped, spaces as `-`. */
export function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // links and images: their text
    .replace(/<[^>]+>/g, '') // HTML tags
    .replace(/[`*]/g, '') // code and emphasis marks
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '').replace(/ /g, '-');
}

/** Every anchor a page has: its headings' slugs, repeats numbered as GitHub numbers them. */
export function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const [, heading] of withoutCodeBlocks(text).matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const base = slug(heading!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** The page's links and images that are not URLs (`http:`, `mailto:`…): `[text](target)`,
 * outside code blocks and inline code, with their line. */
export function relativeLinks(text: string): { target: string; line: number }[] {
  const links: { target: string; line: number }[] = [];
  withoutCodeBlocks(text)
    .split('\n')
    .forEach((raw, i) => {
      const line = raw.replace(/`[^`]*`/g, '');
      for (const [, target] of line.matchAll(/!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
        if (!/^[a-z][a-z0-9+.-]*:/i.test(target!)) links.push({ target: target!, line: i + 1 });
      }
    });
  return links;
}

/** The section under the first heading with this text, up to the next heading of its level
 * or above. */
export function section(text: string, heading: string): string {
  const lines = text.split('\n');
  const prose = withoutCodeBlocks(text).split('\n'); // a `# comment` in code is no heading
  const start = prose.findIndex((l) => /^#{1,6} /.test(l) && l.replace(/^#+ /, '').trim() === heading);
  if (start < 0) throw new Error(`no heading "${heading}"`);
  const level = /^#+/.exec(prose[start]!)![0].length;
  const end = prose.findIndex((l, i) => i > start && new RegExp(`^#{1,${level}} `).test(l));
  return lines.slice(start, end < 0 ? undefined : end).join('\n');
}
