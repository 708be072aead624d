// Element-wise means of the matrices the probes return (per sample → per request, per
// request → per run): used by the server and by the eval clients alike.

/** Element-wise mean of equally shaped matrices. */
export function meanMatrix(ms: number[][][]): number[][] {
  return ms[0]!.map((row, i) => row.map((_, j) => ms.reduce((a, m) => a + m[i]![j]!, 0) / ms.length));
}

/** Element-wise mean of equally long vectors. */
export function meanVector(vs: number[][]): number[] {
  return vs[0]!.map((_, i) => vs.reduce((a, v) => a + v[i]!, 0) / vs.length);
}
