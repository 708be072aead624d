// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

export const Pool = {
  /**
   * max over layers and heads (RefuteBench)
   */
  POOL_MAX: 'POOL_MAX',
  POOL_MEAN: 'POOL_MEAN',
} as const;

export type Pool =
  /**
   * max over layers and heads (RefuteBench)
   */
  | 'POOL_MAX'
  | 0
  | 'POOL_MEAN'
  | 1

export type Pool__Output = typeof Pool[keyof typeof Pool]
