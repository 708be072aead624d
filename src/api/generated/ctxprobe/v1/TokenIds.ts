// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface TokenIds {
  'ids'?: (number)[];
  'tokens'?: (string)[];
}

export interface TokenIds__Output {
  'ids': (number)[];
  'tokens': (string)[];
}
