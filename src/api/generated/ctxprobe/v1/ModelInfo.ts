// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { Long } from '@grpc/proto-loader';

export interface ModelInfo {
  'name'?: (string);
  /**
   * llama, mistral, qwen2, gpt2
   */
  'family'?: (string);
  /**
   * config.json model_type
   */
  'modelType'?: (string);
  'layers'?: (number);
  'heads'?: (number);
  'kvHeads'?: (number);
  'headDim'?: (number);
  'hidden'?: (number);
  'vocab'?: (number);
  /**
   * context length used for truncation and rolling windows
   */
  'maxLength'?: (number);
  /**
   * cpu, webgpu, cuda:N
   */
  'device'?: (string);
  /**
   * float32, float16, bfloat16
   */
  'dtype'?: (string);
  /**
   * why this compute dtype (asked for, CPU default, the checkpoint's bfloat16 on CUDA, …)
   */
  'dtypeReason'?: (string);
  /**
   * The largest RawAttention answer this model gives (layers × heads × queries × keys ×
   * bytes per value), so a client can size its request.
   */
  'maxRawAttentionBytes'?: (number | string | Long);
  /**
   * The GPU as the host's drivers name it (webgpu: the Vulkan drivers Dawn chooses from;
   * cuda: the NVIDIA GPUs); empty on the CPU.
   */
  'adapter'?: (string);
  /**
   * How the weights are stored and held in memory, and why: the checkpoint's dtypes, then
   * widened to the compute dtype at load or kept as stored (each matrix widened for its
   * product) where widened they would not fit.
   */
  'weights'?: (string);
}

export interface ModelInfo__Output {
  'name': (string);
  /**
   * llama, mistral, qwen2, gpt2
   */
  'family': (string);
  /**
   * config.json model_type
   */
  'modelType': (string);
  'layers': (number);
  'heads': (number);
  'kvHeads': (number);
  'headDim': (number);
  'hidden': (number);
  'vocab': (number);
  /**
   * context length used for truncation and rolling windows
   */
  'maxLength': (number);
  /**
   * cpu, webgpu, cuda:N
   */
  'device': (string);
  /**
   * float32, float16, bfloat16
   */
  'dtype': (string);
  /**
   * why this compute dtype (asked for, CPU default, the checkpoint's bfloat16 on CUDA, …)
   */
  'dtypeReason': (string);
  /**
   * The largest RawAttention answer this model gives (layers × heads × queries × keys ×
   * bytes per value), so a client can size its request.
   */
  'maxRawAttentionBytes': (number);
  /**
   * The GPU as the host's drivers name it (webgpu: the Vulkan drivers Dawn chooses from;
   * cuda: the NVIDIA GPUs); empty on the CPU.
   */
  'adapter': (string);
  /**
   * How the weights are stored and held in memory, and why: the checkpoint's dtypes, then
   * widened to the compute dtype at load or kept as stored (each matrix widened for its
   * product) where widened they would not fit.
   */
  'weights': (string);
}
