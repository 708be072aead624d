// Small dense linear algebra of the answers: element-wise means of the matrices the probes
// return (per sample → per request, per request → per run), and the least-squares fit of
// attribution's random-subset surrogate.

/** Element-wise mean of equally shaped matrices. */
export function meanMatrix(ms: number[][][]): number[][] {
  return ms[0]!.map((row, i) => row.map((_, j) => ms.reduce((a, m) => a + m[i]![j]!, 0) / ms.length));
}

/** Element-wise mean of equally long vectors. */
export function meanVector(vs: number[][]): number[] {
  return vs[0]!.map((_, i) => vs.reduce((a, v) => a + v[i]!, 0) / vs.length);
}

/** Least squares of y ≈ intercept + X·w (X: rows × features), through the normal equations
 * with `ridge` added to the weights' diagonal (not the intercept's), solved by Gaussian
 * elimination with partial pivoting; and R² of the fit (1 when y is constant and fitted). */
export function leastSquares(X: number[][], y: number[], ridge = 0): { intercept: number; weights: number[]; r2: number } {
  const n = y.length;
  const k = X[0]?.length ?? 0;
  const row = (i: number) => [1, ...X[i]!];
  const A = Array.from({ length: k + 1 }, (_, a) => Array.from({ length: k + 1 }, (_, b) => (a === b && a > 0 ? ridge : 0)));
  const rhs = new Array<number>(k + 1).fill(0);
  for (let i = 0; i < n; i++) {
    const r = row(i);
    for (let a = 0; a <= k; a++) {
      rhs[a]! += r[a]! * y[i]!;
      for (let b = 0; b <= k; b++) A[a]![b]! += r[a]! * r[b]!;
    }
  }
  const beta = solve(A, rhs);
  const fitted = (i: number) => row(i).reduce((s, v, a) => s + v * beta[a]!, 0);
  const mean = y.reduce((a, b) => a + b, 0) / Math.max(1, n);
  let res = 0;
  let tot = 0;
  for (let i = 0; i < n; i++) {
    res += (y[i]! - fitted(i)) ** 2;
    tot += (y[i]! - mean) ** 2;
  }
  return { intercept: beta[0]!, weights: beta.slice(1), r2: tot > 0 ? 1 - res / tot : 1 };
}

/** A·x = b for a square A (copied); a pivot below 1e-300 gives 0 for that unknown. */
export function solve(A: number[][], b: number[]): number[] {
  const n = b.length;
  const M = A.map((r, i) => [...r, b[i]!]);
  for (let c = 0; c < n; c++) {
    let p = c;
    for (let r = c + 1; r < n; r++) if (Math.abs(M[r]![c]!) > Math.abs(M[p]![c]!)) p = r;
    [M[c], M[p]] = [M[p]!, M[c]!];
    const pivot = M[c]![c]!;
    if (Math.abs(pivot) < 1e-300) continue;
    for (let r = 0; r < n; r++) {
      if (r === c) continue;
      const f = M[r]![c]! / pivot;
      if (f !== 0) for (let j = c; j <= n; j++) M[r]![j]! -= f * M[c]![j]!;
    }
  }
  return M.map((r, i) => (Math.abs(r[i]!) < 1e-300 ? 0 : r[n]! / r[i]!));
}
