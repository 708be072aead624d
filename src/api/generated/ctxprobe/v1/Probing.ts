// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { AttentionSlice as _ctxprobe_v1_AttentionSlice, AttentionSlice__Output as _ctxprobe_v1_AttentionSlice__Output } from '../../ctxprobe/v1/AttentionSlice.js';
import type { AttributeRequest as _ctxprobe_v1_AttributeRequest, AttributeRequest__Output as _ctxprobe_v1_AttributeRequest__Output } from '../../ctxprobe/v1/AttributeRequest.js';
import type { AttributeResponse as _ctxprobe_v1_AttributeResponse, AttributeResponse__Output as _ctxprobe_v1_AttributeResponse__Output } from '../../ctxprobe/v1/AttributeResponse.js';
import type { ProbeRequest as _ctxprobe_v1_ProbeRequest, ProbeRequest__Output as _ctxprobe_v1_ProbeRequest__Output } from '../../ctxprobe/v1/ProbeRequest.js';
import type { ProbeResponse as _ctxprobe_v1_ProbeResponse, ProbeResponse__Output as _ctxprobe_v1_ProbeResponse__Output } from '../../ctxprobe/v1/ProbeResponse.js';
import type { RawAttentionRequest as _ctxprobe_v1_RawAttentionRequest, RawAttentionRequest__Output as _ctxprobe_v1_RawAttentionRequest__Output } from '../../ctxprobe/v1/RawAttentionRequest.js';

/**
 * Attention statistics over labelled chunks, computed inside the model graph.
 */
export interface ProbingClient extends grpc.Client {
  /**
   * Counterfactual chunk attribution: for each chosen chunk, the change in a target
   * chunk's log-likelihood when the chunk is removed (its text deleted, the rest
   * re-tokenised) or masked (its keys hidden from attention for every query after it);
   * also keep-only, CHARP's "last h history turns" sweep, and random keep/drop patterns
   * with a least-squares surrogate (ContextCite). All variants of a call are one scoring
   * job sharing the tokens before their first change (prefix cache).
   */
  Attribute(argument: _ctxprobe_v1_AttributeRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_AttributeResponse__Output>): grpc.ClientUnaryCall;
  Attribute(argument: _ctxprobe_v1_AttributeRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_ctxprobe_v1_AttributeResponse__Output>): grpc.ClientUnaryCall;
  Attribute(argument: _ctxprobe_v1_AttributeRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_AttributeResponse__Output>): grpc.ClientUnaryCall;
  Attribute(argument: _ctxprobe_v1_AttributeRequest, callback: grpc.requestCallback<_ctxprobe_v1_AttributeResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Counterfactual chunk attribution: for each chosen chunk, the change in a target
   * chunk's log-likelihood when the chunk is removed (its text deleted, the rest
   * re-tokenised) or masked (its keys hidden from attention for every query after it);
   * also keep-only, CHARP's "last h history turns" sweep, and random keep/drop patterns
   * with a least-squares surrogate (ContextCite). All variants of a call are one scoring
   * job sharing the tokens before their first change (prefix cache).
   */
  attribute(argument: _ctxprobe_v1_AttributeRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_AttributeResponse__Output>): grpc.ClientUnaryCall;
  attribute(argument: _ctxprobe_v1_AttributeRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_ctxprobe_v1_AttributeResponse__Output>): grpc.ClientUnaryCall;
  attribute(argument: _ctxprobe_v1_AttributeRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_AttributeResponse__Output>): grpc.ClientUnaryCall;
  attribute(argument: _ctxprobe_v1_AttributeRequest, callback: grpc.requestCallback<_ctxprobe_v1_AttributeResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * Per-layer chunk distributions (CHARPEval Appendix C.1: argmax votes, and attention
   * mass) and round heatmaps (RefuteBench 2.0 §5) for a batch of samples, with the mean
   * over the samples.
   */
  Probe(argument: _ctxprobe_v1_ProbeRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_ProbeResponse__Output>): grpc.ClientUnaryCall;
  Probe(argument: _ctxprobe_v1_ProbeRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_ctxprobe_v1_ProbeResponse__Output>): grpc.ClientUnaryCall;
  Probe(argument: _ctxprobe_v1_ProbeRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_ProbeResponse__Output>): grpc.ClientUnaryCall;
  Probe(argument: _ctxprobe_v1_ProbeRequest, callback: grpc.requestCallback<_ctxprobe_v1_ProbeResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Per-layer chunk distributions (CHARPEval Appendix C.1: argmax votes, and attention
   * mass) and round heatmaps (RefuteBench 2.0 §5) for a batch of samples, with the mean
   * over the samples.
   */
  probe(argument: _ctxprobe_v1_ProbeRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_ProbeResponse__Output>): grpc.ClientUnaryCall;
  probe(argument: _ctxprobe_v1_ProbeRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_ctxprobe_v1_ProbeResponse__Output>): grpc.ClientUnaryCall;
  probe(argument: _ctxprobe_v1_ProbeRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_ProbeResponse__Output>): grpc.ClientUnaryCall;
  probe(argument: _ctxprobe_v1_ProbeRequest, callback: grpc.requestCallback<_ctxprobe_v1_ProbeResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * Raw attention probabilities of one sample for chosen layers, heads and query rows,
   * one message per (layer, head); refused (INVALID_ARGUMENT) beyond the server's size cap.
   */
  RawAttention(argument: _ctxprobe_v1_RawAttentionRequest, metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientReadableStream<_ctxprobe_v1_AttentionSlice__Output>;
  RawAttention(argument: _ctxprobe_v1_RawAttentionRequest, options?: grpc.CallOptions): grpc.ClientReadableStream<_ctxprobe_v1_AttentionSlice__Output>;
  /**
   * Raw attention probabilities of one sample for chosen layers, heads and query rows,
   * one message per (layer, head); refused (INVALID_ARGUMENT) beyond the server's size cap.
   */
  rawAttention(argument: _ctxprobe_v1_RawAttentionRequest, metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientReadableStream<_ctxprobe_v1_AttentionSlice__Output>;
  rawAttention(argument: _ctxprobe_v1_RawAttentionRequest, options?: grpc.CallOptions): grpc.ClientReadableStream<_ctxprobe_v1_AttentionSlice__Output>;
  
}

/**
 * Attention statistics over labelled chunks, computed inside the model graph.
 */
export interface ProbingHandlers extends grpc.UntypedServiceImplementation {
  /**
   * Counterfactual chunk attribution: for each chosen chunk, the change in a target
   * chunk's log-likelihood when the chunk is removed (its text deleted, the rest
   * re-tokenised) or masked (its keys hidden from attention for every query after it);
   * also keep-only, CHARP's "last h history turns" sweep, and random keep/drop patterns
   * with a least-squares surrogate (ContextCite). All variants of a call are one scoring
   * job sharing the tokens before their first change (prefix cache).
   */
  Attribute: grpc.handleUnaryCall<_ctxprobe_v1_AttributeRequest__Output, _ctxprobe_v1_AttributeResponse>;
  
  /**
   * Per-layer chunk distributions (CHARPEval Appendix C.1: argmax votes, and attention
   * mass) and round heatmaps (RefuteBench 2.0 §5) for a batch of samples, with the mean
   * over the samples.
   */
  Probe: grpc.handleUnaryCall<_ctxprobe_v1_ProbeRequest__Output, _ctxprobe_v1_ProbeResponse>;
  
  /**
   * Raw attention probabilities of one sample for chosen layers, heads and query rows,
   * one message per (layer, head); refused (INVALID_ARGUMENT) beyond the server's size cap.
   */
  RawAttention: grpc.handleServerStreamingCall<_ctxprobe_v1_RawAttentionRequest__Output, _ctxprobe_v1_AttentionSlice>;
  
}

export interface ProbingDefinition extends grpc.ServiceDefinition {
  Attribute: MethodDefinition<_ctxprobe_v1_AttributeRequest, _ctxprobe_v1_AttributeResponse, _ctxprobe_v1_AttributeRequest__Output, _ctxprobe_v1_AttributeResponse__Output>
  Probe: MethodDefinition<_ctxprobe_v1_ProbeRequest, _ctxprobe_v1_ProbeResponse, _ctxprobe_v1_ProbeRequest__Output, _ctxprobe_v1_ProbeResponse__Output>
  RawAttention: MethodDefinition<_ctxprobe_v1_RawAttentionRequest, _ctxprobe_v1_AttentionSlice, _ctxprobe_v1_RawAttentionRequest__Output, _ctxprobe_v1_AttentionSlice__Output>
}
