// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface BoolValue {
  'value'?: (boolean);
}

export interface BoolValue__Output {
  'value': (boolean);
}
