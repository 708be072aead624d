// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


/**
 * A row-major matrix.
 */
export interface Matrix {
  'rows'?: (number);
  'cols'?: (number);
  'values'?: (number | string)[];
}

/**
 * A row-major matrix.
 */
export interface Matrix__Output {
  'rows': (number);
  'cols': (number);
  'values': (number)[];
}
