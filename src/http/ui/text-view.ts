// The sample's text as the viewer page shows it (app.ts): token by token, each chunk
// marked, each token coloured by a value of its own (where the query rows look, or its
// log-prob), with the attention those values come from read out of raw-attention slices.
import { f16ToF32 } from '../../common/floats.js';

// d3 comes as a script (vendor/).
declare const d3: { interpolateBlues(t: number): string; interpolateReds(t: number): string };

/** A colour on a light-to-dark ramp for v in [0, 1] (the text view's backgrounds). */
const ramp = (scheme: 'blues' | 'reds', v: number) =>
  (scheme === 'blues' ? d3.interpolateBlues : d3.interpolateReds)(Math.max(0, Math.min(1, v)) * 0.85);

/** A token as text: byte-level BPE's Ġ / Ċ and SentencePiece's ▁ shown as the space or newline they stand for. */
const shown = (t: string) => t.replace(/Ġ|▁/g, ' ').replace(/Ċ/g, '\n');

/** Mean attention on each key token of the query rows that can see it (a query at position
 * p sees keys 0..p), over the slices' layers and heads. Averaged over all rows instead, a
 * key inside the query chunk counted the rows before it as zeros, and the chunk came out
 * pale beside everything before it whatever the model did. */
export function keyMass(slices: { data: string; queries: number; keys: number; queryStart?: number | string }[], keys: number): number[] {
  const out = new Array<number>(keys).fill(0);
  const seenBy = new Array<number>(keys).fill(0);
  for (const s of slices) {
    const bytes = Uint8Array.from(atob(s.data), (c) => c.charCodeAt(0));
    const view = new DataView(bytes.buffer);
    for (let q = 0; q < s.queries; q++) {
      const visible = Math.min(s.keys, Number(s.queryStart ?? 0) + q + 1);
      for (let k = 0; k < visible; k++) {
        out[k]! += f16ToF32(view.getUint16((q * s.keys + k) * 2, true));
        seenBy[k]!++;
      }
    }
  }
  return out.map((v, k) => v / Math.max(1, seenBy[k]!));
}

/** The sample's text, token by token, each chunk marked, coloured by `value` (0..1). */
export function tokenText(
  probe: { spans: { label: string; start: number; end: number }[]; tokens: string[] },
  values: (number | undefined)[],
  scheme: 'blues' | 'reds',
  describe: (t: number) => string,
): HTMLElement {
  const div = document.createElement('div');
  div.className = 'tokens';
  probe.spans.forEach((span) => {
    const label = document.createElement('span');
    label.className = 'chunk-label';
    label.textContent = span.label;
    div.append(label);
    for (let t = span.start; t < span.end; t++) {
      const tok = document.createElement('span');
      tok.className = 'tok';
      tok.textContent = shown(probe.tokens[t] ?? '');
      const v = values[t];
      if (v !== undefined) tok.style.background = ramp(scheme, v);
      if (v !== undefined && v > 0.55) tok.style.color = '#fff';
      tok.title = `${t}: ${JSON.stringify(probe.tokens[t])} ${describe(t)}`;
      tok.dataset.value = v === undefined ? '' : v.toFixed(4);
      div.append(tok);
    }
  });
  return div;
}
