// Typed reads of a GGUF file's metadata, each refusal naming the file and the key: what
// the architecture table (gguf-arch.ts) and the tokenizer (text/gguf-tokenizer.ts) share.
import { CheckpointError } from '../common/errors.js';
import { GGUF_TYPE, describeValue, type GgufFile, type GgufValue } from './gguf.js';

const INTEGER_TYPES = new Set<number>([0, 1, 2, 3, 4, 5, 10, 11]);

export class GgufMeta {
  constructor(readonly g: GgufFile) {}

  get file(): string {
    return this.g.file;
  }

  has(key: string): boolean {
    return this.g.metadata.has(key);
  }

  fail(key: string, want: string, v?: GgufValue): CheckpointError {
    return new CheckpointError(`${this.g.file}: ${key} must be ${want}${v ? ` (got ${describeValue(v)})` : ''}`);
  }

  /** An integer of any GGUF integer type; absent: `fallback`. */
  int(key: string, fallback?: number): number | undefined {
    const v = this.g.metadata.get(key);
    if (v === undefined) return fallback;
    if (!INTEGER_TYPES.has(v.type)) throw this.fail(key, 'an integer', v);
    const n =
      typeof v.value === 'bigint'
        ? v.value <= BigInt(Number.MAX_SAFE_INTEGER) && v.value >= -BigInt(Number.MAX_SAFE_INTEGER)
          ? Number(v.value)
          : NaN
        : (v.value as number);
    if (!Number.isSafeInteger(n)) throw this.fail(key, 'an integer below 2^53', v);
    return n;
  }

  /** A token id: an integer, where uint32 -1 (and int -1) mean none, as llama.cpp reads them. */
  tokenId(key: string, fallback?: number): number | undefined {
    const v = this.g.metadata.get(key);
    if (v === undefined) return fallback;
    const n = this.int(key)!;
    return n === 0xffffffff || n === -1 ? undefined : n;
  }

  /** A number of any numeric type (float32 values as they were stored). */
  number(key: string, fallback?: number): number | undefined {
    const v = this.g.metadata.get(key);
    if (v === undefined) return fallback;
    if (v.type === GGUF_TYPE.FLOAT32 || v.type === GGUF_TYPE.FLOAT64) return v.value;
    return this.int(key);
  }

  string(key: string, fallback?: string): string | undefined {
    const v = this.g.metadata.get(key);
    if (v === undefined) return fallback;
    if (v.type !== GGUF_TYPE.STRING) throw this.fail(key, 'a string', v);
    return v.value;
  }

  bool(key: string, fallback?: boolean): boolean | undefined {
    const v = this.g.metadata.get(key);
    if (v === undefined) return fallback;
    if (v.type !== GGUF_TYPE.BOOL) throw this.fail(key, 'a bool', v);
    return v.value;
  }

  strings(key: string): string[] | undefined {
    const v = this.g.metadata.get(key);
    if (v === undefined) return undefined;
    if (v.type !== GGUF_TYPE.ARRAY || v.of !== GGUF_TYPE.STRING) throw this.fail(key, 'an array of strings', v);
    return v.value as string[];
  }

  /** A numeric array as numbers (64-bit integers within 2^53). */
  numbers(key: string): number[] | undefined {
    const v = this.g.metadata.get(key);
    if (v === undefined) return undefined;
    if (v.type !== GGUF_TYPE.ARRAY || !(v.of in NUMERIC_ARRAYS)) throw this.fail(key, 'an array of numbers', v);
    return Array.from(v.value as ArrayLike<number | bigint>, (x) => (typeof x === 'bigint' ? Number(x) : x));
  }

  bools(key: string): boolean[] | undefined {
    const v = this.g.metadata.get(key);
    if (v === undefined) return undefined;
    if (v.type !== GGUF_TYPE.ARRAY || v.of !== GGUF_TYPE.BOOL) throw this.fail(key, 'an array of bools', v);
    return v.value as boolean[];
  }

  /** A per-layer integer that llama.cpp takes as one value or an array of one per layer:
   * ctxprobe's families have one value for every layer, so an array must repeat it. */
  perLayer(key: string, layers: number, fallback?: number): number | undefined {
    const v = this.g.metadata.get(key);
    if (v?.type !== GGUF_TYPE.ARRAY) return this.int(key, fallback);
    const list = this.numbers(key)!;
    if (list.length !== layers) throw this.fail(key, `one value or ${layers} (one per layer)`, v);
    if (list.some((x) => x !== list[0]))
      throw new CheckpointError(`${this.file}: ${key} differs between layers ([${list.slice(0, 8)}…]), which is not supported`);
    return list[0];
  }
}

const NUMERIC_ARRAYS: Record<number, true> = {
  0: true,
  1: true,
  2: true,
  3: true,
  4: true,
  5: true,
  6: true,
  10: true,
  11: true,
  12: true,
};
