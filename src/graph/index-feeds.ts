// A pass's integer feeds (token ids, positions, rows) as one upload on WebGPU.
//
// onnxruntime's WebGPU provider copies every host input to the device on its own: a
// staging buffer made, written and copied for each, the costliest node a decode step has
// on the host (its profiler, 2026-11-27: MemcpyFromHost 0.82 ms each on the H100, 14 in a
// step of 31.8 ms; 0.13 ms on lavapipe, where a MatMul's dispatch is 0.05). And an int64
// feed read by index arithmetic put that arithmetic on the CPU (the provider has no int64
// kernels), whose results went up again: the new tokens' KV slots expanded to
// [B, kv_heads, T, head_dim] int64, 10 MB a 4096-token pass.
//
// So a graph built for WebGPU declares such feeds with `GraphBuilder.indexInput`, and
// takes them all as one int32 input, split in the graph:
//   index_feeds [n] int32 ─Split(index_feed_sizes)─► input_ids, position_ids, … (─Reshape─► [B, T])
// with the sizes the graph needs on the host (`size.<dim>`, int64 [1] each: a Reshape's
// shape, a Slice's end) fed beside it and read by no device node. `packIndexFeeds` turns
// a pass's named int64 feeds into those inputs; CPU and CUDA graphs take the feeds as
// they are.

/** One feed that travels in `index_feeds`: its name and its dims (numbers or names). */
export interface IndexFeed {
  name: string;
  dims: (number | string)[];
}

/** What a graph takes in `index_feeds`: its pieces in order, and the dims it reads as
 * `size.<dim>` inputs. */
export interface IndexFeedPlan {
  feeds: IndexFeed[];
  sizes: string[];
}

export const INDEX_FEEDS = 'index_feeds';
export const INDEX_FEED_SIZES = 'index_feed_sizes';
export const sizeInput = (dim: string) => `size.${dim}`;

/** A feed as the packer sees it: int64 values and their dims. */
export interface Int64Feed {
  dims: readonly number[];
  data: BigInt64Array;
}

export type PackedFeed = { type: 'int32'; dims: number[]; data: Int32Array } | { type: 'int64'; dims: number[]; data: BigInt64Array };

const INT32_MIN = -(2n ** 31n);
const INT32_MAX = 2n ** 31n - 1n;

/** The plan's feeds, taken from `feeds` (each int64, its dims matching the plan's: a named
 * dim the same size wherever it appears), as `index_feeds`, `index_feed_sizes` and the
 * `size.<dim>` inputs. A value outside int32 is an error naming its feed. */
export function packIndexFeeds(plan: IndexFeedPlan, feeds: Record<string, Int64Feed>): Record<string, PackedFeed> {
  const dims = new Map<string, number>();
  let total = 0;
  for (const f of plan.feeds) {
    const feed = feeds[f.name];
    if (!feed) throw new Error(`index feeds: no feed ${f.name}`);
    if (feed.dims.length !== f.dims.length) throw new Error(`index feeds: ${f.name} has ${feed.dims.length} dims, not ${f.dims.length}`);
    f.dims.forEach((d, i) => {
      const size = feed.dims[i]!;
      const known = typeof d === 'number' ? d : dims.get(d);
      if (known !== undefined && known !== size) throw new Error(`index feeds: ${f.name} dim ${i} (${d}) is ${size}, not ${known}`);
      if (typeof d === 'string') dims.set(d, size);
    });
    total += feed.data.length;
  }
  const packed = new Int32Array(total);
  const sizes = new BigInt64Array(plan.feeds.length);
  let at = 0;
  plan.feeds.forEach((f, k) => {
    const data = feeds[f.name]!.data;
    for (let i = 0; i < data.length; i++) {
      const v = data[i]!;
      if (v < INT32_MIN || v > INT32_MAX) throw new Error(`index feeds: ${f.name}[${i}] = ${v} is outside int32`);
      packed[at + i] = Number(v);
    }
    at += data.length;
    sizes[k] = BigInt(data.length);
  });
  const out: Record<string, PackedFeed> = {
    [INDEX_FEEDS]: { type: 'int32', dims: [total], data: packed },
    [INDEX_FEED_SIZES]: { type: 'int64', dims: [plan.feeds.length], data: sizes },
  };
  for (const d of plan.sizes) {
    const size = dims.get(d);
    if (size === undefined) throw new Error(`index feeds: no feed has dim ${d}`);
    out[sizeInput(d)] = { type: 'int64', dims: [1], data: BigInt64Array.of(BigInt(size)) };
  }
  return out;
}
