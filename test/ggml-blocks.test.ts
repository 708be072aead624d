// The block formats: a quantizer written from the formats' description (ggml-quantize.ts)
// and ggml's dequantization (the reader) agree on every value's place; the exact form's
// parts (what the graph computes with) give back each dequantized value.
import { describe, expect, it } from 'vitest';
import { BLOCKS, EXACT_FORMS, dequantizeRows, repackRows, type QuantTypeName } from '../src/checkpoint/ggml-blocks.js';
import { quantizeRows } from '../src/checkpoint/ggml-quantize.js';
import { rng } from '../src/common/random.js';

const TYPES = Object.keys(BLOCKS) as QuantTypeName[];

function randomRows(rows: number, cols: number, seed: number): Float32Array {
  const rnd = rng(seed);
  // A spread of magnitudes per row, and a ramp within: a value out of place shows.
  return Float32Array.from(
    { length: rows * cols },
    (_, i) => (rnd() * 2 - 1) * (1 + (i % cols) / cols) * 0.1 * (1 + (Math.floor(i / cols) % 3)),
  );
}

describe.each(TYPES)('%s', (type) => {
  const [rows, cols] = [3, 512];
  const x = randomRows(rows, cols, 11);
  const bytes = quantizeRows(type, x, rows, cols);
  const w = dequantizeRows(type, bytes, rows, cols);

  it("dequantizes what was quantized, each value in its place (within the format's step)", () => {
    expect(bytes.length).toBe(((rows * cols) / BLOCKS[type].values) * BLOCKS[type].bytes);
    // The step: the block's range over the levels the format has (8 bits: 255, 4 bits: 15…).
    const levels: Record<QuantTypeName, number> = { Q8_0: 127, Q4_0: 7, Q4_1: 15, Q4_K: 15, Q5_K: 31, Q6_K: 31 };
    let worst = 0;
    for (let i = 0; i < x.length; i++) worst = Math.max(worst, Math.abs(w[i]! - x[i]!) / (0.6 / levels[type]));
    // Every value within about one step of its own block's scale (0.6 bounds any block's |x|).
    expect(worst).toBeLessThan(1.2);
    // And closer to its own input than to its neighbour's: a value out of place would not be.
    let closer = 0;
    for (let i = 1; i < x.length; i++) if (Math.abs(w[i]! - x[i]!) <= Math.abs(w[i]! - x[i - 1]!)) closer++;
    expect(closer / (x.length - 1)).toBeGreaterThan(0.7);
  });

  it('its exact form gives back every dequantized value: (lo − zlo)·s + 16·(hi − zhi)·s + min', () => {
    const form = EXACT_FORMS[type];
    const { parts, nonFinite } = repackRows(type, bytes, rows, cols);
    expect(nonFinite).toBeUndefined();
    const scales = new Float32Array(parts.scales!.buffer);
    const mins = parts.mins && new Float32Array(parts.mins.buffer);
    const zeroBytes = Math.ceil(cols / form.block / 2);
    const nibble = (a: Uint8Array, i: number) => (a[i >> 1]! >> (i & 1 ? 4 : 0)) & 15;
    for (let r = 0; r < rows; r++)
      for (let c = 0; c < cols; c++) {
        const i = r * cols + c;
        const b = Math.floor(c / form.block);
        const zlo = nibble(parts.loZeros!.subarray(r * zeroBytes), b);
        const s = scales[r * (cols / form.block) + b]!;
        let v = (nibble(parts.lo!, i) - zlo) * s;
        if (form.hi) v += 16 * ((nibble(parts.hi!, i) - nibble(parts.hiZeros!.subarray(r * zeroBytes), b)) * s);
        if (form.mins) v += mins![r * (cols / 32) + Math.floor(c / 32)]!;
        expect(Math.abs(v - w[i]!)).toBeLessThanOrEqual(Math.abs(w[i]!) * 2 ** -22);
      }
  });

  // Only the formats of more than 4 bits have one.
  if (EXACT_FORMS[type].hi)
    it('its 8-bit form (int8 activations) gives back every dequantized value: (u − z)·s + min, the scales those of the nibble form', () => {
      const form = EXACT_FORMS[type];
      const blocks = cols / form.block;
      const { parts, nonFinite } = repackRows(type, bytes, rows, cols, true);
      expect(nonFinite).toBeUndefined();
      expect(Object.keys(parts).sort()).toEqual(['scales', 'wide', 'wideZeros', ...(form.mins ? ['mins'] : [])].sort());
      expect(parts.wide!.length).toBe(rows * cols);
      expect(parts.wideZeros!.length).toBe(rows * blocks);
      expect(parts.scales).toEqual(repackRows(type, bytes, rows, cols).parts.scales);
      const scales = new Float32Array(parts.scales!.buffer);
      const mins = parts.mins && new Float32Array(parts.mins.buffer);
      for (let r = 0; r < rows; r++)
        for (let c = 0; c < cols; c++) {
          const i = r * cols + c;
          const b = r * blocks + Math.floor(c / form.block);
          let v = (parts.wide![i]! - parts.wideZeros![b]!) * scales[b]!;
          if (form.mins) v += mins![r * (cols / 32) + Math.floor(c / 32)]!;
          expect(Math.abs(v - w[i]!)).toBeLessThanOrEqual(Math.abs(w[i]!) * 2 ** -22);
        }
    });

  it('a non-finite scale is found, by row', () => {
    const broken = bytes.slice();
    // The f16 d of row 1's first block: Q6_K keeps it last in the block, the others first.
    const at = (cols / BLOCKS[type].values) * BLOCKS[type].bytes + (type === 'Q6_K' ? 208 : 0);
    broken[at] = 0x00;
    broken[at + 1] = 0x7c; // f16 infinity
    expect(repackRows(type, broken, rows, cols).nonFinite).toBe(1);
  });
});

describe('Q4_K repacked four bytes at a time', () => {
  it("gives the bytes' own path's parts, bit for bit (a copy one byte off takes that path)", () => {
    const r = rng(91);
    const [rows, cols] = [6, 512];
    const blocks = quantizeRows(
      'Q4_K',
      Float32Array.from({ length: rows * cols }, () => r() * 2 - 1),
      rows,
      cols,
    );
    const shifted = new Uint8Array(blocks.length + 1);
    shifted.set(blocks, 1);
    const words = repackRows('Q4_K', blocks, rows, cols).parts;
    const bytes = repackRows('Q4_K', shifted.subarray(1), rows, cols).parts;
    expect(Object.keys(words).sort()).toEqual(Object.keys(bytes).sort());
    for (const part of Object.keys(words) as (keyof typeof words)[])
      expect(Buffer.from(words[part]!).equals(Buffer.from(bytes[part]!)), part).toBe(true);
  });
});
