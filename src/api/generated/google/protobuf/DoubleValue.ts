// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface DoubleValue {
  'value'?: (number | string);
}

export interface DoubleValue__Output {
  'value': (number);
}
