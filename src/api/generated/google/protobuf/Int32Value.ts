// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface Int32Value {
  'value'?: (number);
}

export interface Int32Value__Output {
  'value': (number);
}
