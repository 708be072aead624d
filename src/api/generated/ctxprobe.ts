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
import type { CustomHttpPattern as _google_api_CustomHttpPattern, CustomHttpPattern__Output as _google_api_CustomHttpPattern__Output } from './google/api/CustomHttpPattern.js';
import type { HttpRule as _google_api_HttpRule, HttpRule__Output as _google_api_HttpRule__Output } from './google/api/HttpRule.js';
import type { BoolValue as _google_protobuf_BoolValue, BoolValue__Output as _google_protobuf_BoolValue__Output } from './google/protobuf/BoolValue.js';
import type { BytesValue as _google_protobuf_BytesValue, BytesValue__Output as _google_protobuf_BytesValue__Output } from './google/protobuf/BytesValue.js';
import type { DescriptorProto as _google_protobuf_DescriptorProto, DescriptorProto__Output as _google_protobuf_DescriptorProto__Output } from './google/protobuf/DescriptorProto.js';
import type { DoubleValue as _google_protobuf_DoubleValue, DoubleValue__Output as _google_protobuf_DoubleValue__Output } from './google/protobuf/DoubleValue.js';
import type { EnumDescriptorProto as _google_protobuf_EnumDescriptorProto, EnumDescriptorProto__Output as _google_protobuf_EnumDescriptorProto__Output } from './google/protobuf/EnumDescriptorProto.js';
import type { EnumOptions as _google_protobuf_EnumOptions, EnumOptions__Output as _google_protobuf_EnumOptions__Output } from './google/protobuf/EnumOptions.js';
import type { EnumValueDescriptorProto as _google_protobuf_EnumValueDescriptorProto, EnumValueDescriptorProto__Output as _google_protobuf_EnumValueDescriptorProto__Output } from './google/protobuf/EnumValueDescriptorProto.js';
import type { EnumValueOptions as _google_protobuf_EnumValueOptions, EnumValueOptions__Output as _google_protobuf_EnumValueOptions__Output } from './google/protobuf/EnumValueOptions.js';
import type { ExtensionRangeOptions as _google_protobuf_ExtensionRangeOptions, ExtensionRangeOptions__Output as _google_protobuf_ExtensionRangeOptions__Output } from './google/protobuf/ExtensionRangeOptions.js';
import type { FeatureSet as _google_protobuf_FeatureSet, FeatureSet__Output as _google_protobuf_FeatureSet__Output } from './google/protobuf/FeatureSet.js';
import type { FeatureSetDefaults as _google_protobuf_FeatureSetDefaults, FeatureSetDefaults__Output as _google_protobuf_FeatureSetDefaults__Output } from './google/protobuf/FeatureSetDefaults.js';
import type { FieldDescriptorProto as _google_protobuf_FieldDescriptorProto, FieldDescriptorProto__Output as _google_protobuf_FieldDescriptorProto__Output } from './google/protobuf/FieldDescriptorProto.js';
import type { FieldOptions as _google_protobuf_FieldOptions, FieldOptions__Output as _google_protobuf_FieldOptions__Output } from './google/protobuf/FieldOptions.js';
import type { FileDescriptorProto as _google_protobuf_FileDescriptorProto, FileDescriptorProto__Output as _google_protobuf_FileDescriptorProto__Output } from './google/protobuf/FileDescriptorProto.js';
import type { FileDescriptorSet as _google_protobuf_FileDescriptorSet, FileDescriptorSet__Output as _google_protobuf_FileDescriptorSet__Output } from './google/protobuf/FileDescriptorSet.js';
import type { FileOptions as _google_protobuf_FileOptions, FileOptions__Output as _google_protobuf_FileOptions__Output } from './google/protobuf/FileOptions.js';
import type { FloatValue as _google_protobuf_FloatValue, FloatValue__Output as _google_protobuf_FloatValue__Output } from './google/protobuf/FloatValue.js';
import type { GeneratedCodeInfo as _google_protobuf_GeneratedCodeInfo, GeneratedCodeInfo__Output as _google_protobuf_GeneratedCodeInfo__Output } from './google/protobuf/GeneratedCodeInfo.js';
import type { Int32Value as _google_protobuf_Int32Value, Int32Value__Output as _google_protobuf_Int32Value__Output } from './google/protobuf/Int32Value.js';
import type { Int64Value as _google_protobuf_Int64Value, Int64Value__Output as _google_protobuf_Int64Value__Output } from './google/protobuf/Int64Value.js';
import type { MessageOptions as _google_protobuf_MessageOptions, MessageOptions__Output as _google_protobuf_MessageOptions__Output } from './google/protobuf/MessageOptions.js';
import type { MethodDescriptorProto as _google_protobuf_MethodDescriptorProto, MethodDescriptorProto__Output as _google_protobuf_MethodDescriptorProto__Output } from './google/protobuf/MethodDescriptorProto.js';
import type { MethodOptions as _google_protobuf_MethodOptions, MethodOptions__Output as _google_protobuf_MethodOptions__Output } from './google/protobuf/MethodOptions.js';
import type { OneofDescriptorProto as _google_protobuf_OneofDescriptorProto, OneofDescriptorProto__Output as _google_protobuf_OneofDescriptorProto__Output } from './google/protobuf/OneofDescriptorProto.js';
import type { OneofOptions as _google_protobuf_OneofOptions, OneofOptions__Output as _google_protobuf_OneofOptions__Output } from './google/protobuf/OneofOptions.js';
import type { ServiceDescriptorProto as _google_protobuf_ServiceDescriptorProto, ServiceDescriptorProto__Output as _google_protobuf_ServiceDescriptorProto__Output } from './google/protobuf/ServiceDescriptorProto.js';
import type { ServiceOptions as _google_protobuf_ServiceOptions, ServiceOptions__Output as _google_protobuf_ServiceOptions__Output } from './google/protobuf/ServiceOptions.js';
import type { SourceCodeInfo as _google_protobuf_SourceCodeInfo, SourceCodeInfo__Output as _google_protobuf_SourceCodeInfo__Output } from './google/protobuf/SourceCodeInfo.js';
import type { StringValue as _google_protobuf_StringValue, StringValue__Output as _google_protobuf_StringValue__Output } from './google/protobuf/StringValue.js';
import type { UInt32Value as _google_protobuf_UInt32Value, UInt32Value__Output as _google_protobuf_UInt32Value__Output } from './google/protobuf/UInt32Value.js';
import type { UInt64Value as _google_protobuf_UInt64Value, UInt64Value__Output as _google_protobuf_UInt64Value__Output } from './google/protobuf/UInt64Value.js';
import type { UninterpretedOption as _google_protobuf_UninterpretedOption, UninterpretedOption__Output as _google_protobuf_UninterpretedOption__Output } from './google/protobuf/UninterpretedOption.js';

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
    api: {
      CustomHttpPattern: MessageTypeDefinition<_google_api_CustomHttpPattern, _google_api_CustomHttpPattern__Output>
      HttpRule: MessageTypeDefinition<_google_api_HttpRule, _google_api_HttpRule__Output>
    }
    protobuf: {
      BoolValue: MessageTypeDefinition<_google_protobuf_BoolValue, _google_protobuf_BoolValue__Output>
      BytesValue: MessageTypeDefinition<_google_protobuf_BytesValue, _google_protobuf_BytesValue__Output>
      DescriptorProto: MessageTypeDefinition<_google_protobuf_DescriptorProto, _google_protobuf_DescriptorProto__Output>
      DoubleValue: MessageTypeDefinition<_google_protobuf_DoubleValue, _google_protobuf_DoubleValue__Output>
      Edition: EnumTypeDefinition
      EnumDescriptorProto: MessageTypeDefinition<_google_protobuf_EnumDescriptorProto, _google_protobuf_EnumDescriptorProto__Output>
      EnumOptions: MessageTypeDefinition<_google_protobuf_EnumOptions, _google_protobuf_EnumOptions__Output>
      EnumValueDescriptorProto: MessageTypeDefinition<_google_protobuf_EnumValueDescriptorProto, _google_protobuf_EnumValueDescriptorProto__Output>
      EnumValueOptions: MessageTypeDefinition<_google_protobuf_EnumValueOptions, _google_protobuf_EnumValueOptions__Output>
      ExtensionRangeOptions: MessageTypeDefinition<_google_protobuf_ExtensionRangeOptions, _google_protobuf_ExtensionRangeOptions__Output>
      FeatureSet: MessageTypeDefinition<_google_protobuf_FeatureSet, _google_protobuf_FeatureSet__Output>
      FeatureSetDefaults: MessageTypeDefinition<_google_protobuf_FeatureSetDefaults, _google_protobuf_FeatureSetDefaults__Output>
      FieldDescriptorProto: MessageTypeDefinition<_google_protobuf_FieldDescriptorProto, _google_protobuf_FieldDescriptorProto__Output>
      FieldOptions: MessageTypeDefinition<_google_protobuf_FieldOptions, _google_protobuf_FieldOptions__Output>
      FileDescriptorProto: MessageTypeDefinition<_google_protobuf_FileDescriptorProto, _google_protobuf_FileDescriptorProto__Output>
      FileDescriptorSet: MessageTypeDefinition<_google_protobuf_FileDescriptorSet, _google_protobuf_FileDescriptorSet__Output>
      FileOptions: MessageTypeDefinition<_google_protobuf_FileOptions, _google_protobuf_FileOptions__Output>
      FloatValue: MessageTypeDefinition<_google_protobuf_FloatValue, _google_protobuf_FloatValue__Output>
      GeneratedCodeInfo: MessageTypeDefinition<_google_protobuf_GeneratedCodeInfo, _google_protobuf_GeneratedCodeInfo__Output>
      Int32Value: MessageTypeDefinition<_google_protobuf_Int32Value, _google_protobuf_Int32Value__Output>
      Int64Value: MessageTypeDefinition<_google_protobuf_Int64Value, _google_protobuf_Int64Value__Output>
      MessageOptions: MessageTypeDefinition<_google_protobuf_MessageOptions, _google_protobuf_MessageOptions__Output>
      MethodDescriptorProto: MessageTypeDefinition<_google_protobuf_MethodDescriptorProto, _google_protobuf_MethodDescriptorProto__Output>
      MethodOptions: MessageTypeDefinition<_google_protobuf_MethodOptions, _google_protobuf_MethodOptions__Output>
      OneofDescriptorProto: MessageTypeDefinition<_google_protobuf_OneofDescriptorProto, _google_protobuf_OneofDescriptorProto__Output>
      OneofOptions: MessageTypeDefinition<_google_protobuf_OneofOptions, _google_protobuf_OneofOptions__Output>
      ServiceDescriptorProto: MessageTypeDefinition<_google_protobuf_ServiceDescriptorProto, _google_protobuf_ServiceDescriptorProto__Output>
      ServiceOptions: MessageTypeDefinition<_google_protobuf_ServiceOptions, _google_protobuf_ServiceOptions__Output>
      SourceCodeInfo: MessageTypeDefinition<_google_protobuf_SourceCodeInfo, _google_protobuf_SourceCodeInfo__Output>
      StringValue: MessageTypeDefinition<_google_protobuf_StringValue, _google_protobuf_StringValue__Output>
      SymbolVisibility: EnumTypeDefinition
      UInt32Value: MessageTypeDefinition<_google_protobuf_UInt32Value, _google_protobuf_UInt32Value__Output>
      UInt64Value: MessageTypeDefinition<_google_protobuf_UInt64Value, _google_protobuf_UInt64Value__Output>
      UninterpretedOption: MessageTypeDefinition<_google_protobuf_UninterpretedOption, _google_protobuf_UninterpretedOption__Output>
    }
  }
}

