// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface Tokens {
  'ids'?: (number)[];
}

export interface Tokens__Output {
  'ids': (number)[];
}
