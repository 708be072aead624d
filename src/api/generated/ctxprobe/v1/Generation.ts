// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { GenerateRequest as _ctxprobe_v1_GenerateRequest, GenerateRequest__Output as _ctxprobe_v1_GenerateRequest__Output } from '../../ctxprobe/v1/GenerateRequest.js';
import type { GenerateResponse as _ctxprobe_v1_GenerateResponse, GenerateResponse__Output as _ctxprobe_v1_GenerateResponse__Output } from '../../ctxprobe/v1/GenerateResponse.js';

/**
 * The model writes: the responses a study then scores, probes and attributes.
 */
export interface GenerationClient extends grpc.Client {
  /**
   * Generate from a prompt (labelled chunks — text or token ids — or chat messages with
   * the model's template); one message per generated token of each choice, as it is
   * made. With `attention`: per generated token, where it looked while it was written —
   * votes and mass per layer over the prompt's chunks and the response so far, from the
   * same decode pass. Every step of every running request shares the model's passes.
   */
  Generate(argument: _ctxprobe_v1_GenerateRequest, metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientReadableStream<_ctxprobe_v1_GenerateResponse__Output>;
  Generate(argument: _ctxprobe_v1_GenerateRequest, options?: grpc.CallOptions): grpc.ClientReadableStream<_ctxprobe_v1_GenerateResponse__Output>;
  /**
   * Generate from a prompt (labelled chunks — text or token ids — or chat messages with
   * the model's template); one message per generated token of each choice, as it is
   * made. With `attention`: per generated token, where it looked while it was written —
   * votes and mass per layer over the prompt's chunks and the response so far, from the
   * same decode pass. Every step of every running request shares the model's passes.
   */
  generate(argument: _ctxprobe_v1_GenerateRequest, metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientReadableStream<_ctxprobe_v1_GenerateResponse__Output>;
  generate(argument: _ctxprobe_v1_GenerateRequest, options?: grpc.CallOptions): grpc.ClientReadableStream<_ctxprobe_v1_GenerateResponse__Output>;
  
}

/**
 * The model writes: the responses a study then scores, probes and attributes.
 */
export interface GenerationHandlers extends grpc.UntypedServiceImplementation {
  /**
   * Generate from a prompt (labelled chunks — text or token ids — or chat messages with
   * the model's template); one message per generated token of each choice, as it is
   * made. With `attention`: per generated token, where it looked while it was written —
   * votes and mass per layer over the prompt's chunks and the response so far, from the
   * same decode pass. Every step of every running request shares the model's passes.
   */
  Generate: grpc.handleServerStreamingCall<_ctxprobe_v1_GenerateRequest__Output, _ctxprobe_v1_GenerateResponse>;
  
}

export interface GenerationDefinition extends grpc.ServiceDefinition {
  Generate: MethodDefinition<_ctxprobe_v1_GenerateRequest, _ctxprobe_v1_GenerateResponse, _ctxprobe_v1_GenerateRequest__Output, _ctxprobe_v1_GenerateResponse__Output>
}
