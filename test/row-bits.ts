// Whether a row's bits depend on how many rows share its tensor (the contracts "batched =
// alone" and "decode = score" at the level of one op), shared by test/webgpu.test.ts and
// bench/gpu-kernels.ts. No test-runner imports here.
import ort from 'onnxruntime-node';
import { GraphBuilder } from '../src/graph/builder.js';
import type { ProviderKind } from '../src/common/providers.js';
import { rng } from '../src/common/random.js';

/** An op over the rows of `x` [N, width]: its output has N rows. */
export type RowForm = (g: GraphBuilder, x: string, width: number) => string;

/** Of `rows` random rows of `width`, how many give other bits through `form` in tensors of
 * `few` rows (1: alone) than in one tensor of all of them, on `target`'s provider. */
export async function rowsThatDiffer(form: RowForm, width: number, rows = 24, few = 1, target: ProviderKind = 'webgpu'): Promise<number> {
  const g = new GraphBuilder(target);
  const x = g.input('x', 'float32', ['N', width]);
  g.output('y', form(g, x, width), 'float32', ['N', 'out']);
  const session = await ort.InferenceSession.create(g.encode('rows'), { executionProviders: [target === 'webgpu' ? 'webgpu' : 'cpu'] });
  try {
    const r = rng(width);
    const data = Float32Array.from({ length: rows * width }, () => (r() - 0.5) * (1 + 10 * r()));
    const all = (await session.run({ x: new ort.Tensor('float32', data, [rows, width]) })).y!;
    const out = all.dims[1]!;
    let differ = 0;
    for (let first = 0; first < rows; first += few) {
      const part = data.subarray(first * width, (first + few) * width);
      const some = (await session.run({ x: new ort.Tensor('float32', part, [few, width]) })).y!.data as Float32Array;
      for (let i = 0; i < few; i++) {
        const among = (all.data as Float32Array).subarray((first + i) * out, (first + i + 1) * out);
        if (some.subarray(i * out, (i + 1) * out).some((v, j) => v !== among[j])) differ++;
      }
    }
    return differ;
  } finally {
    await session.release();
  }
}
