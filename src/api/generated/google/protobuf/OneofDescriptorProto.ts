// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { OneofOptions as _google_protobuf_OneofOptions, OneofOptions__Output as _google_protobuf_OneofOptions__Output } from '../../google/protobuf/OneofOptions.js';

export interface OneofDescriptorProto {
  'name'?: (string);
  'options'?: (_google_protobuf_OneofOptions | null);
}

export interface OneofDescriptorProto__Output {
  'name': (string);
  'options': (_google_protobuf_OneofOptions__Output | null);
}
