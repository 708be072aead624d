// Token-sequence helpers shared by scoring, segmentation and prefix grouping.

/** How many leading tokens two sequences share. */
export function commonPrefixLength(a: readonly number[], b: readonly number[]): number {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
}

/** Lexicographic order of token sequences (sorting puts shared prefixes side by side). */
export function compareTokens(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return a.length - b.length;
}

// Spreading an array into a call (`Math.max(...xs)`, `push(...xs)`) puts every element on
// the stack: 130,000 ids in one client chunk overflowed it ("Maximum call stack size
// exceeded", answered as INTERNAL). Client-sized arrays go through these loops instead.

/** The largest of `values`, or `empty` when there are none. */
export function maxOf(values: Iterable<number>, empty = -Infinity): number {
  let m = empty;
  for (const v of values) if (v > m) m = v;
  return m;
}

/** The smallest of `values`, or `empty` when there are none. */
export function minOf(values: Iterable<number>, empty = Infinity): number {
  let m = empty;
  for (const v of values) if (v < m) m = v;
  return m;
}

/** Append `items` to `into`, however many. */
export function append<T>(into: T[], items: readonly T[]): T[] {
  for (const x of items) into.push(x);
  return into;
}
