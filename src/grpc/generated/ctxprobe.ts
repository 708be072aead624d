import type * as grpc from '@grpc/grpc-js';
import type { EnumTypeDefinition, MessageTypeDefinition } from '@grpc/proto-loader';

import type { AttentionSlice as _ctxprobe_v1_AttentionSlice, AttentionSlice__Output as _ctxprobe_v1_AttentionSlice__Output } from './ctxprobe/v1/AttentionSlice.js';
import type { AttributeRequest as _ctxprobe_v1_AttributeRequest, AttributeRequest__Output as _ctxprobe_v1_AttributeRequest__Output } from './ctxprobe/v1/AttributeRequest.js';
import type { AttributeResponse as _ctxprobe_v1_AttributeResponse, AttributeResponse__Output as _ctxprobe_v1_AttributeResponse__Output } from './ctxprobe/v1/AttributeResponse.js';
import type { AttributionSample as _ctxprobe_v1_AttributionSample, AttributionSample__Output as _ctxprobe_v1_AttributionSample__Output } from './ctxprobe/v1/AttributionSample.js';
import type { ChatMessage as _ctxprobe_v1_ChatMessage, ChatMessage__Output as _ctxprobe_v1_ChatMessage__Output } from './ctxprobe/v1/ChatMessage.js';
import type { Chunk as _ctxprobe_v1_Chunk, Chunk__Output as _ctxprobe_v1_Chunk__Output } from './ctxprobe/v1/Chunk.js';
import type { ChunkEffect as _ctxprobe_v1_ChunkEffect, ChunkEffect__Output as _ctxprobe_v1_ChunkEffect__Output } from './ctxprobe/v1/ChunkEffect.js';
import type { ContextScore as _ctxprobe_v1_ContextScore, ContextScore__Output as _ctxprobe_v1_ContextScore__Output } from './ctxprobe/v1/ContextScore.js';
import type { ContinuationAttention as _ctxprobe_v1_ContinuationAttention, ContinuationAttention__Output as _ctxprobe_v1_ContinuationAttention__Output } from './ctxprobe/v1/ContinuationAttention.js';
import type { ContinuationScore as _ctxprobe_v1_ContinuationScore, ContinuationScore__Output as _ctxprobe_v1_ContinuationScore__Output } from './ctxprobe/v1/ContinuationScore.js';
import type { Effect as _ctxprobe_v1_Effect, Effect__Output as _ctxprobe_v1_Effect__Output } from './ctxprobe/v1/Effect.js';
import type { GenerateRequest as _ctxprobe_v1_GenerateRequest, GenerateRequest__Output as _ctxprobe_v1_GenerateRequest__Output } from './ctxprobe/v1/GenerateRequest.js';
import type { GenerateResponse as _ctxprobe_v1_GenerateResponse, GenerateResponse__Output as _ctxprobe_v1_GenerateResponse__Output } from './ctxprobe/v1/GenerateResponse.js';
import type { GenerationClient as _ctxprobe_v1_GenerationClient, GenerationDefinition as _ctxprobe_v1_GenerationDefinition } from './ctxprobe/v1/Generation.js';
import type { ItemScore as _ctxprobe_v1_ItemScore, ItemScore__Output as _ctxprobe_v1_ItemScore__Output } from './ctxprobe/v1/ItemScore.js';
import type { KeepOnlyEffect as _ctxprobe_v1_KeepOnlyEffect, KeepOnlyEffect__Output as _ctxprobe_v1_KeepOnlyEffect__Output } from './ctxprobe/v1/KeepOnlyEffect.js';
import type { ListModelsRequest as _ctxprobe_v1_ListModelsRequest, ListModelsRequest__Output as _ctxprobe_v1_ListModelsRequest__Output } from './ctxprobe/v1/ListModelsRequest.js';
import type { ListModelsResponse as _ctxprobe_v1_ListModelsResponse, ListModelsResponse__Output as _ctxprobe_v1_ListModelsResponse__Output } from './ctxprobe/v1/ListModelsResponse.js';
import type { Matrix as _ctxprobe_v1_Matrix, Matrix__Output as _ctxprobe_v1_Matrix__Output } from './ctxprobe/v1/Matrix.js';
import type { MinK as _ctxprobe_v1_MinK, MinK__Output as _ctxprobe_v1_MinK__Output } from './ctxprobe/v1/MinK.js';
import type { ModelInfo as _ctxprobe_v1_ModelInfo, ModelInfo__Output as _ctxprobe_v1_ModelInfo__Output } from './ctxprobe/v1/ModelInfo.js';
import type { ProbeMean as _ctxprobe_v1_ProbeMean, ProbeMean__Output as _ctxprobe_v1_ProbeMean__Output } from './ctxprobe/v1/ProbeMean.js';
import type { ProbeRequest as _ctxprobe_v1_ProbeRequest, ProbeRequest__Output as _ctxprobe_v1_ProbeRequest__Output } from './ctxprobe/v1/ProbeRequest.js';
import type { ProbeResponse as _ctxprobe_v1_ProbeResponse, ProbeResponse__Output as _ctxprobe_v1_ProbeResponse__Output } from './ctxprobe/v1/ProbeResponse.js';
import type { ProbeSample as _ctxprobe_v1_ProbeSample, ProbeSample__Output as _ctxprobe_v1_ProbeSample__Output } from './ctxprobe/v1/ProbeSample.js';
import type { ProbingClient as _ctxprobe_v1_ProbingClient, ProbingDefinition as _ctxprobe_v1_ProbingDefinition } from './ctxprobe/v1/Probing.js';
import type { RawAttentionRequest as _ctxprobe_v1_RawAttentionRequest, RawAttentionRequest__Output as _ctxprobe_v1_RawAttentionRequest__Output } from './ctxprobe/v1/RawAttentionRequest.js';
import type { RollingItem as _ctxprobe_v1_RollingItem, RollingItem__Output as _ctxprobe_v1_RollingItem__Output } from './ctxprobe/v1/RollingItem.js';
import type { RollingRequest as _ctxprobe_v1_RollingRequest, RollingRequest__Output as _ctxprobe_v1_RollingRequest__Output } from './ctxprobe/v1/RollingRequest.js';
import type { RollingResponse as _ctxprobe_v1_RollingResponse, RollingResponse__Output as _ctxprobe_v1_RollingResponse__Output } from './ctxprobe/v1/RollingResponse.js';
import type { RollingScore as _ctxprobe_v1_RollingScore, RollingScore__Output as _ctxprobe_v1_RollingScore__Output } from './ctxprobe/v1/RollingScore.js';
import type { SampleAttribution as _ctxprobe_v1_SampleAttribution, SampleAttribution__Output as _ctxprobe_v1_SampleAttribution__Output } from './ctxprobe/v1/SampleAttribution.js';
import type { SampleProbe as _ctxprobe_v1_SampleProbe, SampleProbe__Output as _ctxprobe_v1_SampleProbe__Output } from './ctxprobe/v1/SampleProbe.js';
import type { SamplingOptions as _ctxprobe_v1_SamplingOptions, SamplingOptions__Output as _ctxprobe_v1_SamplingOptions__Output } from './ctxprobe/v1/SamplingOptions.js';
import type { ScoreItem as _ctxprobe_v1_ScoreItem, ScoreItem__Output as _ctxprobe_v1_ScoreItem__Output } from './ctxprobe/v1/ScoreItem.js';
import type { ScoreRequest as _ctxprobe_v1_ScoreRequest, ScoreRequest__Output as _ctxprobe_v1_ScoreRequest__Output } from './ctxprobe/v1/ScoreRequest.js';
import type { ScoreResponse as _ctxprobe_v1_ScoreResponse, ScoreResponse__Output as _ctxprobe_v1_ScoreResponse__Output } from './ctxprobe/v1/ScoreResponse.js';
import type { ScoringClient as _ctxprobe_v1_ScoringClient, ScoringDefinition as _ctxprobe_v1_ScoringDefinition } from './ctxprobe/v1/Scoring.js';
import type { Span as _ctxprobe_v1_Span, Span__Output as _ctxprobe_v1_Span__Output } from './ctxprobe/v1/Span.js';
import type { StreamScoreRequest as _ctxprobe_v1_StreamScoreRequest, StreamScoreRequest__Output as _ctxprobe_v1_StreamScoreRequest__Output } from './ctxprobe/v1/StreamScoreRequest.js';
import type { StreamScoreResponse as _ctxprobe_v1_StreamScoreResponse, StreamScoreResponse__Output as _ctxprobe_v1_StreamScoreResponse__Output } from './ctxprobe/v1/StreamScoreResponse.js';
import type { SubsetFit as _ctxprobe_v1_SubsetFit, SubsetFit__Output as _ctxprobe_v1_SubsetFit__Output } from './ctxprobe/v1/SubsetFit.js';
import type { SweepPoint as _ctxprobe_v1_SweepPoint, SweepPoint__Output as _ctxprobe_v1_SweepPoint__Output } from './ctxprobe/v1/SweepPoint.js';
import type { TokenIds as _ctxprobe_v1_TokenIds, TokenIds__Output as _ctxprobe_v1_TokenIds__Output } from './ctxprobe/v1/TokenIds.js';
import type { TokenizeRequest as _ctxprobe_v1_TokenizeRequest, TokenizeRequest__Output as _ctxprobe_v1_TokenizeRequest__Output } from './ctxprobe/v1/TokenizeRequest.js';
import type { TokenizeResponse as _ctxprobe_v1_TokenizeResponse, TokenizeResponse__Output as _ctxprobe_v1_TokenizeResponse__Output } from './ctxprobe/v1/TokenizeResponse.js';
import type { Tokens as _ctxprobe_v1_Tokens, Tokens__Output as _ctxprobe_v1_Tokens__Output } from './ctxprobe/v1/Tokens.js';
import type { TopToken as _ctxprobe_v1_TopToken, TopToken__Output as _ctxprobe_v1_TopToken__Output } from './ctxprobe/v1/TopToken.js';
import type { TopTokens as _ctxprobe_v1_TopTokens, TopTokens__Output as _ctxprobe_v1_TopTokens__Output } from './ctxprobe/v1/TopTokens.js';
import type { UnconditionalScore as _ctxprobe_v1_UnconditionalScore, UnconditionalScore__Output as _ctxprobe_v1_UnconditionalScore__Output } from './ctxprobe/v1/UnconditionalScore.js';
import type { BoolValue as _google_protobuf_BoolValue, BoolValue__Output as _google_protobuf_BoolValue__Output } from './google/protobuf/BoolValue.js';
import type { BytesValue as _google_protobuf_BytesValue, BytesValue__Output as _google_protobuf_BytesValue__Output } from './google/protobuf/BytesValue.js';
import type { DoubleValue as _google_protobuf_DoubleValue, DoubleValue__Output as _google_protobuf_DoubleValue__Output } from './google/protobuf/DoubleValue.js';
import type { FloatValue as _google_protobuf_FloatValue, FloatValue__Output as _google_protobuf_FloatValue__Output } from './google/protobuf/FloatValue.js';
import type { Int32Value as _google_protobuf_Int32Value, Int32Value__Output as _google_protobuf_Int32Value__Output } from './google/protobuf/Int32Value.js';
import type { Int64Value as _google_protobuf_Int64Value, Int64Value__Output as _google_protobuf_Int64Value__Output } from './google/protobuf/Int64Value.js';
import type { StringValue as _google_protobuf_StringValue, StringValue__Output as _google_protobuf_StringValue__Output } from './google/protobuf/StringValue.js';
import type { UInt32Value as _google_protobuf_UInt32Value, UInt32Value__Output as _google_protobuf_UInt32Value__Output } from './google/protobuf/UInt32Value.js';
import type { UInt64Value as _google_protobuf_UInt64Value, UInt64Value__Output as _google_protobuf_UInt64Value__Output } from './google/protobuf/UInt64Value.js';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  ctxprobe: {
    v1: {
      AttentionDType: EnumTypeDefinition
      AttentionSlice: MessageTypeDefinition<_ctxprobe_v1_AttentionSlice, _ctxprobe_v1_AttentionSlice__Output>
      AttributeRequest: MessageTypeDefinition<_ctxprobe_v1_AttributeRequest, _ctxprobe_v1_AttributeRequest__Output>
      AttributeResponse: MessageTypeDefinition<_ctxprobe_v1_AttributeResponse, _ctxprobe_v1_AttributeResponse__Output>
      AttributionSample: MessageTypeDefinition<_ctxprobe_v1_AttributionSample, _ctxprobe_v1_AttributionSample__Output>
      ChatMessage: MessageTypeDefinition<_ctxprobe_v1_ChatMessage, _ctxprobe_v1_ChatMessage__Output>
      Chunk: MessageTypeDefinition<_ctxprobe_v1_Chunk, _ctxprobe_v1_Chunk__Output>
      ChunkEffect: MessageTypeDefinition<_ctxprobe_v1_ChunkEffect, _ctxprobe_v1_ChunkEffect__Output>
      ContextScore: MessageTypeDefinition<_ctxprobe_v1_ContextScore, _ctxprobe_v1_ContextScore__Output>
      ContinuationAttention: MessageTypeDefinition<_ctxprobe_v1_ContinuationAttention, _ctxprobe_v1_ContinuationAttention__Output>
      ContinuationScore: MessageTypeDefinition<_ctxprobe_v1_ContinuationScore, _ctxprobe_v1_ContinuationScore__Output>
      Effect: MessageTypeDefinition<_ctxprobe_v1_Effect, _ctxprobe_v1_Effect__Output>
      GenerateRequest: MessageTypeDefinition<_ctxprobe_v1_GenerateRequest, _ctxprobe_v1_GenerateRequest__Output>
      GenerateResponse: MessageTypeDefinition<_ctxprobe_v1_GenerateResponse, _ctxprobe_v1_GenerateResponse__Output>
      /**
       * The model writes: the responses a study then scores, probes and attributes.
       */
      Generation: SubtypeConstructor<typeof grpc.Client, _ctxprobe_v1_GenerationClient> & { service: _ctxprobe_v1_GenerationDefinition }
      Intervention: EnumTypeDefinition
      ItemScore: MessageTypeDefinition<_ctxprobe_v1_ItemScore, _ctxprobe_v1_ItemScore__Output>
      KeepOnlyEffect: MessageTypeDefinition<_ctxprobe_v1_KeepOnlyEffect, _ctxprobe_v1_KeepOnlyEffect__Output>
      ListModelsRequest: MessageTypeDefinition<_ctxprobe_v1_ListModelsRequest, _ctxprobe_v1_ListModelsRequest__Output>
      ListModelsResponse: MessageTypeDefinition<_ctxprobe_v1_ListModelsResponse, _ctxprobe_v1_ListModelsResponse__Output>
      Matrix: MessageTypeDefinition<_ctxprobe_v1_Matrix, _ctxprobe_v1_Matrix__Output>
      MinK: MessageTypeDefinition<_ctxprobe_v1_MinK, _ctxprobe_v1_MinK__Output>
      ModelInfo: MessageTypeDefinition<_ctxprobe_v1_ModelInfo, _ctxprobe_v1_ModelInfo__Output>
      Pool: EnumTypeDefinition
      ProbeMean: MessageTypeDefinition<_ctxprobe_v1_ProbeMean, _ctxprobe_v1_ProbeMean__Output>
      ProbeRequest: MessageTypeDefinition<_ctxprobe_v1_ProbeRequest, _ctxprobe_v1_ProbeRequest__Output>
      ProbeResponse: MessageTypeDefinition<_ctxprobe_v1_ProbeResponse, _ctxprobe_v1_ProbeResponse__Output>
      ProbeSample: MessageTypeDefinition<_ctxprobe_v1_ProbeSample, _ctxprobe_v1_ProbeSample__Output>
      /**
       * Attention statistics over labelled chunks, computed inside the model graph.
       */
      Probing: SubtypeConstructor<typeof grpc.Client, _ctxprobe_v1_ProbingClient> & { service: _ctxprobe_v1_ProbingDefinition }
      RawAttentionRequest: MessageTypeDefinition<_ctxprobe_v1_RawAttentionRequest, _ctxprobe_v1_RawAttentionRequest__Output>
      Reduce: EnumTypeDefinition
      RollingItem: MessageTypeDefinition<_ctxprobe_v1_RollingItem, _ctxprobe_v1_RollingItem__Output>
      RollingRequest: MessageTypeDefinition<_ctxprobe_v1_RollingRequest, _ctxprobe_v1_RollingRequest__Output>
      RollingResponse: MessageTypeDefinition<_ctxprobe_v1_RollingResponse, _ctxprobe_v1_RollingResponse__Output>
      RollingScore: MessageTypeDefinition<_ctxprobe_v1_RollingScore, _ctxprobe_v1_RollingScore__Output>
      SampleAttribution: MessageTypeDefinition<_ctxprobe_v1_SampleAttribution, _ctxprobe_v1_SampleAttribution__Output>
      SampleProbe: MessageTypeDefinition<_ctxprobe_v1_SampleProbe, _ctxprobe_v1_SampleProbe__Output>
      SamplingOptions: MessageTypeDefinition<_ctxprobe_v1_SamplingOptions, _ctxprobe_v1_SamplingOptions__Output>
      ScoreItem: MessageTypeDefinition<_ctxprobe_v1_ScoreItem, _ctxprobe_v1_ScoreItem__Output>
      ScoreRequest: MessageTypeDefinition<_ctxprobe_v1_ScoreRequest, _ctxprobe_v1_ScoreRequest__Output>
      ScoreResponse: MessageTypeDefinition<_ctxprobe_v1_ScoreResponse, _ctxprobe_v1_ScoreResponse__Output>
      Scoring: SubtypeConstructor<typeof grpc.Client, _ctxprobe_v1_ScoringClient> & { service: _ctxprobe_v1_ScoringDefinition }
      Span: MessageTypeDefinition<_ctxprobe_v1_Span, _ctxprobe_v1_Span__Output>
      StreamScoreRequest: MessageTypeDefinition<_ctxprobe_v1_StreamScoreRequest, _ctxprobe_v1_StreamScoreRequest__Output>
      StreamScoreResponse: MessageTypeDefinition<_ctxprobe_v1_StreamScoreResponse, _ctxprobe_v1_StreamScoreResponse__Output>
      SubsetFit: MessageTypeDefinition<_ctxprobe_v1_SubsetFit, _ctxprobe_v1_SubsetFit__Output>
      SweepPoint: MessageTypeDefinition<_ctxprobe_v1_SweepPoint, _ctxprobe_v1_SweepPoint__Output>
      TokenIds: MessageTypeDefinition<_ctxprobe_v1_TokenIds, _ctxprobe_v1_TokenIds__Output>
      TokenizeRequest: MessageTypeDefinition<_ctxprobe_v1_TokenizeRequest, _ctxprobe_v1_TokenizeRequest__Output>
      TokenizeResponse: MessageTypeDefinition<_ctxprobe_v1_TokenizeResponse, _ctxprobe_v1_TokenizeResponse__Output>
      Tokens: MessageTypeDefinition<_ctxprobe_v1_Tokens, _ctxprobe_v1_Tokens__Output>
      TopToken: MessageTypeDefinition<_ctxprobe_v1_TopToken, _ctxprobe_v1_TopToken__Output>
      TopTokens: MessageTypeDefinition<_ctxprobe_v1_TopTokens, _ctxprobe_v1_TopTokens__Output>
      Truncation: EnumTypeDefinition
      UnconditionalScore: MessageTypeDefinition<_ctxprobe_v1_UnconditionalScore, _ctxprobe_v1_UnconditionalScore__Output>
    }
  }
  google: {
    protobuf: {
      BoolValue: MessageTypeDefinition<_google_protobuf_BoolValue, _google_protobuf_BoolValue__Output>
      BytesValue: MessageTypeDefinition<_google_protobuf_BytesValue, _google_protobuf_BytesValue__Output>
      DoubleValue: MessageTypeDefinition<_google_protobuf_DoubleValue, _google_protobuf_DoubleValue__Output>
      FloatValue: MessageTypeDefinition<_google_protobuf_FloatValue, _google_protobuf_FloatValue__Output>
      Int32Value: MessageTypeDefinition<_google_protobuf_Int32Value, _google_protobuf_Int32Value__Output>
      Int64Value: MessageTypeDefinition<_google_protobuf_Int64Value, _google_protobuf_Int64Value__Output>
      StringValue: MessageTypeDefinition<_google_protobuf_StringValue, _google_protobuf_StringValue__Output>
      UInt32Value: MessageTypeDefinition<_google_protobuf_UInt32Value, _google_protobuf_UInt32Value__Output>
      UInt64Value: MessageTypeDefinition<_google_protobuf_UInt64Value, _google_protobuf_UInt64Value__Output>
    }
  }
}

