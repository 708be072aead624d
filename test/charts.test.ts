// The figures' scales, drawn into linkedom's document as the CLI draws them (no browser):
// the colour legend's ticks, the text view's colour range, a one-point history sweep
// (field defects #6).
import * as Plot from '@observablehq/plot';
import { parseHTML } from 'linkedom';
import { describe, expect, it } from 'vitest';
import { layerCells, niceTicks, robustRange, scaledTo, sweepLines, type Draw } from '../src/figures/charts.js';
import { rng } from '../src/common/random.js';

const draw: Draw = { Plot, document: parseHTML('<!doctype html><html><body></body></html>').document as unknown as Document };

describe('colour legend ticks', () => {
  it('are round steps from 0, written with the same digits, placed at their values', () => {
    // The legend: quarters of 0.3512 read "0, 0.08782, 0.1756, 0.2634, 0.3512".
    const svg = layerCells(draw, [[0.3512, 0.1], [0.2, 0.05]], ['a', 'b'], 'mass');
    const texts = [...svg.querySelectorAll('svg.ramp text')].slice(1); // after the legend's label
    expect(texts.map((t) => t.textContent)).toEqual(['0.0', '0.1', '0.2', '0.3']);
    texts.forEach((t, k) => expect(Number(t.getAttribute('x'))).toBeCloseTo(12 + (256 * (k * 0.1)) / 0.3512, 9));
  });

  it('hold for maxima across twelve decades: 3 to 6 ticks, a step of 1, 2, 2.5 or 5 × 10ᵏ, none past the maximum', () => {
    const random = rng(7);
    for (let i = 0; i < 500; i++) {
      const max = 10 ** (12 * random() - 6);
      const { ticks, digits } = niceTicks(max);
      expect(ticks.length, `${max}`).toBeGreaterThanOrEqual(3);
      expect(ticks.length, `${max}`).toBeLessThanOrEqual(6);
      expect(ticks[0]).toBe(0);
      expect(ticks.at(-1)!).toBeLessThanOrEqual(max * (1 + 1e-9));
      const step = ticks[1]!;
      const mantissa = step / 10 ** Math.floor(Math.log10(step) + 1e-9);
      expect([1, 2, 2.5, 5].some((m) => Math.abs(mantissa - m) < 1e-6), `${max}: step ${step}`).toBe(true);
      ticks.forEach((t, k) => expect(Math.abs(t - k * step)).toBeLessThan(step * 1e-6));
      // The digits show every tick exactly, and no more than the step needs.
      ticks.forEach((t) => expect(Math.abs(Number(t.toFixed(digits)) - t)).toBeLessThan(step * 1e-6));
      expect(digits === 0 || Math.abs(Number(step.toFixed(digits - 1)) - step) > step * 1e-6).toBe(true);
    }
  });
});

describe("the text view's colour range", () => {
  it('is the 2nd to 98th percentile, interpolated as numpy does', () => {
    const values = Array.from({ length: 100 }, (_, i) => 100 - i); // 1..100, any order
    const [lo, hi] = robustRange(values);
    expect(lo).toBeCloseTo(1 + 99 * 0.02, 12);
    expect(hi).toBeCloseTo(1 + 99 * 0.98, 12);
    expect(robustRange([0.3])).toEqual([0.3, 0.3 + 1e-9]);
  });

  it("leaves near-uniform attention spread over the ramp, where scaling by the largest made nearly every token dark", () => {
    // A small model's attention after its sink: every key near 1/200.
    const random = rng(3);
    const mass = Array.from({ length: 200 }, () => 0.005 + 2e-5 * (random() - 0.5));
    const dark = (shades: number[]) => shades.filter((v) => v > 0.55).length / shades.length; // white text from here
    const max = mass.reduce((m, v) => Math.max(m, v));
    expect(dark(mass.map((v) => v / max))).toBe(1);
    const robust = dark(mass.map(scaledTo(robustRange(mass))));
    expect(robust).toBeGreaterThan(0.3);
    expect(robust).toBeLessThan(0.7);
  });
});

describe('the history sweep', () => {
  const titles = (svg: Element) => [...svg.querySelectorAll('title')].map((t) => t.textContent);
  it('is a bar per intervention when one count was kept, and lines through the points otherwise', () => {
    const one = sweepLines(draw, [{ keep: 0, remove: -1.25, mask: -0.5 }], 'sweep');
    expect(one.getAttribute('class')).toBe('figure sweep-bars');
    expect(one.querySelectorAll('g[aria-label="line"]')).toHaveLength(0);
    expect(titles(one)).toEqual(['keep 0, remove: -1.25', 'keep 0, mask: -0.5']);
    const two = sweepLines(draw, [{ keep: 0, remove: -1.25 }, { keep: 1, remove: -0.25 }], 'sweep');
    expect(two.getAttribute('class')).toBe('figure sweep-lines');
    expect(titles(two)).toEqual(['keep 0, remove: -1.25', 'keep 1, remove: -0.25']);
  });
});
