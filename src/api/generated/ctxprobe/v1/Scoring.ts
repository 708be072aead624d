// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { ListModelsRequest as _ctxprobe_v1_ListModelsRequest, ListModelsRequest__Output as _ctxprobe_v1_ListModelsRequest__Output } from '../../ctxprobe/v1/ListModelsRequest.js';
import type { ListModelsResponse as _ctxprobe_v1_ListModelsResponse, ListModelsResponse__Output as _ctxprobe_v1_ListModelsResponse__Output } from '../../ctxprobe/v1/ListModelsResponse.js';
import type { RollingRequest as _ctxprobe_v1_RollingRequest, RollingRequest__Output as _ctxprobe_v1_RollingRequest__Output } from '../../ctxprobe/v1/RollingRequest.js';
import type { RollingResponse as _ctxprobe_v1_RollingResponse, RollingResponse__Output as _ctxprobe_v1_RollingResponse__Output } from '../../ctxprobe/v1/RollingResponse.js';
import type { ScoreRequest as _ctxprobe_v1_ScoreRequest, ScoreRequest__Output as _ctxprobe_v1_ScoreRequest__Output } from '../../ctxprobe/v1/ScoreRequest.js';
import type { ScoreResponse as _ctxprobe_v1_ScoreResponse, ScoreResponse__Output as _ctxprobe_v1_ScoreResponse__Output } from '../../ctxprobe/v1/ScoreResponse.js';
import type { StreamScoreRequest as _ctxprobe_v1_StreamScoreRequest, StreamScoreRequest__Output as _ctxprobe_v1_StreamScoreRequest__Output } from '../../ctxprobe/v1/StreamScoreRequest.js';
import type { StreamScoreResponse as _ctxprobe_v1_StreamScoreResponse, StreamScoreResponse__Output as _ctxprobe_v1_StreamScoreResponse__Output } from '../../ctxprobe/v1/StreamScoreResponse.js';
import type { TokenizeRequest as _ctxprobe_v1_TokenizeRequest, TokenizeRequest__Output as _ctxprobe_v1_TokenizeRequest__Output } from '../../ctxprobe/v1/TokenizeRequest.js';
import type { TokenizeResponse as _ctxprobe_v1_TokenizeResponse, TokenizeResponse__Output as _ctxprobe_v1_TokenizeResponse__Output } from '../../ctxprobe/v1/TokenizeResponse.js';

export interface ScoringClient extends grpc.Client {
  /**
   * The models this server serves, with their facts.
   */
  ListModels(argument: _ctxprobe_v1_ListModelsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_ListModelsResponse__Output>): grpc.ClientUnaryCall;
  ListModels(argument: _ctxprobe_v1_ListModelsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_ctxprobe_v1_ListModelsResponse__Output>): grpc.ClientUnaryCall;
  ListModels(argument: _ctxprobe_v1_ListModelsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_ListModelsResponse__Output>): grpc.ClientUnaryCall;
  ListModels(argument: _ctxprobe_v1_ListModelsRequest, callback: grpc.requestCallback<_ctxprobe_v1_ListModelsResponse__Output>): grpc.ClientUnaryCall;
  /**
   * The models this server serves, with their facts.
   */
  listModels(argument: _ctxprobe_v1_ListModelsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_ListModelsResponse__Output>): grpc.ClientUnaryCall;
  listModels(argument: _ctxprobe_v1_ListModelsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_ctxprobe_v1_ListModelsResponse__Output>): grpc.ClientUnaryCall;
  listModels(argument: _ctxprobe_v1_ListModelsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_ListModelsResponse__Output>): grpc.ClientUnaryCall;
  listModels(argument: _ctxprobe_v1_ListModelsRequest, callback: grpc.requestCallback<_ctxprobe_v1_ListModelsResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * Continuation log-likelihoods, lm-evaluation-harness `loglikelihood` semantics.
   */
  Score(argument: _ctxprobe_v1_ScoreRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_ScoreResponse__Output>): grpc.ClientUnaryCall;
  Score(argument: _ctxprobe_v1_ScoreRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_ctxprobe_v1_ScoreResponse__Output>): grpc.ClientUnaryCall;
  Score(argument: _ctxprobe_v1_ScoreRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_ScoreResponse__Output>): grpc.ClientUnaryCall;
  Score(argument: _ctxprobe_v1_ScoreRequest, callback: grpc.requestCallback<_ctxprobe_v1_ScoreResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Continuation log-likelihoods, lm-evaluation-harness `loglikelihood` semantics.
   */
  score(argument: _ctxprobe_v1_ScoreRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_ScoreResponse__Output>): grpc.ClientUnaryCall;
  score(argument: _ctxprobe_v1_ScoreRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_ctxprobe_v1_ScoreResponse__Output>): grpc.ClientUnaryCall;
  score(argument: _ctxprobe_v1_ScoreRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_ScoreResponse__Output>): grpc.ClientUnaryCall;
  score(argument: _ctxprobe_v1_ScoreRequest, callback: grpc.requestCallback<_ctxprobe_v1_ScoreResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * Rolling log-likelihood (`loglikelihood_rolling`): perplexity, mean loss, Min-K% Prob.
   */
  ScoreRolling(argument: _ctxprobe_v1_RollingRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_RollingResponse__Output>): grpc.ClientUnaryCall;
  ScoreRolling(argument: _ctxprobe_v1_RollingRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_ctxprobe_v1_RollingResponse__Output>): grpc.ClientUnaryCall;
  ScoreRolling(argument: _ctxprobe_v1_RollingRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_RollingResponse__Output>): grpc.ClientUnaryCall;
  ScoreRolling(argument: _ctxprobe_v1_RollingRequest, callback: grpc.requestCallback<_ctxprobe_v1_RollingResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Rolling log-likelihood (`loglikelihood_rolling`): perplexity, mean loss, Min-K% Prob.
   */
  scoreRolling(argument: _ctxprobe_v1_RollingRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_RollingResponse__Output>): grpc.ClientUnaryCall;
  scoreRolling(argument: _ctxprobe_v1_RollingRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_ctxprobe_v1_RollingResponse__Output>): grpc.ClientUnaryCall;
  scoreRolling(argument: _ctxprobe_v1_RollingRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_RollingResponse__Output>): grpc.ClientUnaryCall;
  scoreRolling(argument: _ctxprobe_v1_RollingRequest, callback: grpc.requestCallback<_ctxprobe_v1_RollingResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * For large evaluations: send items as they come, get each answer as soon as it is
   * ready (not in order; match them by item id). A bad item gets an answer carrying its
   * error; the stream goes on. Half-close when done; the server ends the stream after
   * the last answer.
   */
  ScoreStream(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_ctxprobe_v1_StreamScoreRequest, _ctxprobe_v1_StreamScoreResponse__Output>;
  ScoreStream(options?: grpc.CallOptions): grpc.ClientDuplexStream<_ctxprobe_v1_StreamScoreRequest, _ctxprobe_v1_StreamScoreResponse__Output>;
  /**
   * For large evaluations: send items as they come, get each answer as soon as it is
   * ready (not in order; match them by item id). A bad item gets an answer carrying its
   * error; the stream goes on. Half-close when done; the server ends the stream after
   * the last answer.
   */
  scoreStream(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_ctxprobe_v1_StreamScoreRequest, _ctxprobe_v1_StreamScoreResponse__Output>;
  scoreStream(options?: grpc.CallOptions): grpc.ClientDuplexStream<_ctxprobe_v1_StreamScoreRequest, _ctxprobe_v1_StreamScoreResponse__Output>;
  
  /**
   * Token ids (and token strings) of texts, as the model's tokenizer splits them.
   */
  Tokenize(argument: _ctxprobe_v1_TokenizeRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_TokenizeResponse__Output>): grpc.ClientUnaryCall;
  Tokenize(argument: _ctxprobe_v1_TokenizeRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_ctxprobe_v1_TokenizeResponse__Output>): grpc.ClientUnaryCall;
  Tokenize(argument: _ctxprobe_v1_TokenizeRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_TokenizeResponse__Output>): grpc.ClientUnaryCall;
  Tokenize(argument: _ctxprobe_v1_TokenizeRequest, callback: grpc.requestCallback<_ctxprobe_v1_TokenizeResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Token ids (and token strings) of texts, as the model's tokenizer splits them.
   */
  tokenize(argument: _ctxprobe_v1_TokenizeRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_TokenizeResponse__Output>): grpc.ClientUnaryCall;
  tokenize(argument: _ctxprobe_v1_TokenizeRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_ctxprobe_v1_TokenizeResponse__Output>): grpc.ClientUnaryCall;
  tokenize(argument: _ctxprobe_v1_TokenizeRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_ctxprobe_v1_TokenizeResponse__Output>): grpc.ClientUnaryCall;
  tokenize(argument: _ctxprobe_v1_TokenizeRequest, callback: grpc.requestCallback<_ctxprobe_v1_TokenizeResponse__Output>): grpc.ClientUnaryCall;
  
}

export interface ScoringHandlers extends grpc.UntypedServiceImplementation {
  /**
   * The models this server serves, with their facts.
   */
  ListModels: grpc.handleUnaryCall<_ctxprobe_v1_ListModelsRequest__Output, _ctxprobe_v1_ListModelsResponse>;
  
  /**
   * Continuation log-likelihoods, lm-evaluation-harness `loglikelihood` semantics.
   */
  Score: grpc.handleUnaryCall<_ctxprobe_v1_ScoreRequest__Output, _ctxprobe_v1_ScoreResponse>;
  
  /**
   * Rolling log-likelihood (`loglikelihood_rolling`): perplexity, mean loss, Min-K% Prob.
   */
  ScoreRolling: grpc.handleUnaryCall<_ctxprobe_v1_RollingRequest__Output, _ctxprobe_v1_RollingResponse>;
  
  /**
   * For large evaluations: send items as they come, get each answer as soon as it is
   * ready (not in order; match them by item id). A bad item gets an answer carrying its
   * error; the stream goes on. Half-close when done; the server ends the stream after
   * the last answer.
   */
  ScoreStream: grpc.handleBidiStreamingCall<_ctxprobe_v1_StreamScoreRequest__Output, _ctxprobe_v1_StreamScoreResponse>;
  
  /**
   * Token ids (and token strings) of texts, as the model's tokenizer splits them.
   */
  Tokenize: grpc.handleUnaryCall<_ctxprobe_v1_TokenizeRequest__Output, _ctxprobe_v1_TokenizeResponse>;
  
}

export interface ScoringDefinition extends grpc.ServiceDefinition {
  ListModels: MethodDefinition<_ctxprobe_v1_ListModelsRequest, _ctxprobe_v1_ListModelsResponse, _ctxprobe_v1_ListModelsRequest__Output, _ctxprobe_v1_ListModelsResponse__Output>
  Score: MethodDefinition<_ctxprobe_v1_ScoreRequest, _ctxprobe_v1_ScoreResponse, _ctxprobe_v1_ScoreRequest__Output, _ctxprobe_v1_ScoreResponse__Output>
  ScoreRolling: MethodDefinition<_ctxprobe_v1_RollingRequest, _ctxprobe_v1_RollingResponse, _ctxprobe_v1_RollingRequest__Output, _ctxprobe_v1_RollingResponse__Output>
  ScoreStream: MethodDefinition<_ctxprobe_v1_StreamScoreRequest, _ctxprobe_v1_StreamScoreResponse, _ctxprobe_v1_StreamScoreRequest__Output, _ctxprobe_v1_StreamScoreResponse__Output>
  Tokenize: MethodDefinition<_ctxprobe_v1_TokenizeRequest, _ctxprobe_v1_TokenizeResponse, _ctxprobe_v1_TokenizeRequest__Output, _ctxprobe_v1_TokenizeResponse__Output>
}
