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
