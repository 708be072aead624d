// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface BytesValue {
  'value'?: (Buffer | Uint8Array | string);
}

export interface BytesValue__Output {
  'value': (Buffer);
}
