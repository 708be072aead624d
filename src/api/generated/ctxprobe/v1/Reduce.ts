// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

export const Reduce = {
  /**
   * queries: mean; keys: max
   */
  REDUCE_DEFAULT: 'REDUCE_DEFAULT',
  /**
   * keys: over the keys the query token can see
   */
  REDUCE_MEAN: 'REDUCE_MEAN',
  REDUCE_MAX: 'REDUCE_MAX',
  REDUCE_SUM: 'REDUCE_SUM',
} as const;

export type Reduce =
  /**
   * queries: mean; keys: max
   */
  | 'REDUCE_DEFAULT'
  | 0
  /**
   * keys: over the keys the query token can see
   */
  | 'REDUCE_MEAN'
  | 1
  | 'REDUCE_MAX'
  | 2
  | 'REDUCE_SUM'
  | 3

export type Reduce__Output = typeof Reduce[keyof typeof Reduce]
