// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

export const Truncation = {
  /**
   * drop context tokens from the left: (ctx + cont)[-(L+1):][:-1]
   */
  TRUNCATION_LEFT: 'TRUNCATION_LEFT',
  /**
   * refuse an item over the maximum length (INVALID_ARGUMENT)
   */
  TRUNCATION_ERROR: 'TRUNCATION_ERROR',
} as const;

export type Truncation =
  /**
   * drop context tokens from the left: (ctx + cont)[-(L+1):][:-1]
   */
  | 'TRUNCATION_LEFT'
  | 0
  /**
   * refuse an item over the maximum length (INVALID_ARGUMENT)
   */
  | 'TRUNCATION_ERROR'
  | 1

export type Truncation__Output = typeof Truncation[keyof typeof Truncation]
