// Debian's Chromium for the figure and viewer tests, driven by playwright-core, started as
// this machine allows: no sandbox (root), no GPU, and none of the background connections
// a closed network refuses at every start.
import fs from 'node:fs';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const haveChromium = fs.existsSync(CHROMIUM);

export async function launchChromium(): Promise<any> {
  const { chromium } = await import('playwright-core');
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  });
}

/** Every mark of every figure on a page (bars, dots, cells, lines, axis and tick labels,
 * title, legend) that lies outside what a reader sees of it: its <svg>'s box, or across,
 * the box its parent shows (a viewer card scrolls what overflows it, out of sight). */
export function marksOutside(page: any): Promise<string[]> {
  return page.$$eval('svg.figure', (svgs: SVGSVGElement[]) =>
    svgs.flatMap((svg) => {
      const kind = svg.getAttribute('class')!.replace('figure ', '');
      const own = svg.getBoundingClientRect();
      const holder = svg.parentElement!;
      const shown = holder.getBoundingClientRect().left + holder.clientLeft;
      const [left, right] = [Math.max(own.left, shown), Math.min(own.right, shown + holder.clientWidth)];
      const marks = svg.querySelectorAll(
        'g[aria-label="bar"] rect, g[aria-label="dot"] circle, g[aria-label="cell"] rect, g[aria-label="line"] path, ' +
          'g[aria-label$="axis label"] text, g[aria-label$="tick label"] text, text.title, text.legend-label, rect.swatch',
      );
      return [...marks].flatMap((m) => {
        const r = m.getBoundingClientRect();
        const out = r.left < left - 0.5 || r.right > right + 0.5 || r.top < own.top - 0.5 || r.bottom > own.bottom + 0.5;
        const what = `${m.closest('[aria-label]')?.getAttribute('aria-label') ?? m.getAttribute('class')} "${m.querySelector('title')?.textContent ?? m.textContent}"`;
        return out ? [`${kind}: ${what} at ${r.left.toFixed(1)}–${r.right.toFixed(1)}, shown ${left.toFixed(1)}–${right.toFixed(1)}`] : [];
      });
    }),
  );
}
