// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface ListModelsRequest {
}

export interface ListModelsRequest__Output {
}
