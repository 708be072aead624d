// The memory table of docs/models.md#memory (and the README's totals): what the load's own plan (src/engine/
// memory.ts) says Llama-3 shapes need at the defaults (512-token passes, 1 GiB prefix cache)
// in each storage, in GiB: weights at rest + the rest = total. Arithmetic only: no model is
// built. Tied embeddings for 1B and 3B, as the real models have.
//   npx tsx bench/memory-table.ts
import { planMemory, prepackedForInt8, type StoredShape } from '../src/engine/memory.js';
import { parseModelConfig } from '../src/model/config.js';
import { LLAMA3_8B, llamaGgufTensors, q4KMType, type LlamaShape } from '../src/model/synthetic-gguf.js';
import { repackedBytes, quantTypeOf } from '../src/checkpoint/ggml-blocks.js';
import { quantizeTarget } from '../src/model/quantized.js';

const GiB = 2 ** 30;
const SHAPES: [string, LlamaShape & { tied: boolean }][] = [
  ['1B (Llama-3.2-1B)', { hidden_size: 2048, num_hidden_layers: 16, num_attention_heads: 32, num_key_value_heads: 8, intermediate_size: 8192, vocab_size: 128256, max_position_embeddings: 8192, rms_norm_eps: 1e-5, tied: true }],
  ['3B (Llama-3.2-3B)', { hidden_size: 3072, num_hidden_layers: 28, num_attention_heads: 24, num_key_value_heads: 8, intermediate_size: 8192, vocab_size: 128256, max_position_embeddings: 8192, rms_norm_eps: 1e-5, tied: true }],
  ['8B (Llama-3-8B)', { ...LLAMA3_8B, tied: false }],
];
const limits = { maxBatchTokens: 512, maxAttentionBytes: 192 * 2 ** 20, prefixCacheBytes: GiB };

const cell = (p: { weights: number; working: number; need: number }) =>
  `${(p.weights / GiB).toFixed(1)} + ${(p.working / GiB).toFixed(1)} = ${(p.need / GiB).toFixed(1)}`;

console.log('| shape | F32 | BF16 widened at load | BF16 kept as stored | Q8_0 GGUF | Q4_K_M GGUF | Q4_K_M, int8 activations | BF16 `--quantize q4_k` |');
console.log('|---|---|---|---|---|---|---|---|');
for (const [label, shape] of SHAPES) {
  const config = parseModelConfig({ model_type: 'llama', architectures: ['LlamaForCausalLM'], ...shape, tie_word_embeddings: shape.tied });
  const infos = llamaGgufTensors(shape).filter((t) => !(shape.tied && t.name === 'output.weight'));
  const hf = (dims: number[]) => [...dims].reverse();
  const floats = (dtype: 'float32' | 'bfloat16'): StoredShape[] => infos.map((t) => ({ dtype, shape: hf(t.dims) }));
  const quantized = (typeOf: (name: string, dims: number[]) => number | undefined): StoredShape[] =>
    infos.map((t) => {
      const type = t.dims.length === 2 ? quantTypeOf(typeOf(t.name, t.dims) ?? 0) : undefined;
      return type ? { dtype: 'quantized', shape: hf(t.dims), bytes: repackedBytes(type, t.dims[1]!, t.dims[0]!) } : { dtype: 'float32', shape: hf(t.dims) };
    });
  const q8 = quantized(() => 8);
  const q4km = quantized((name) => q4KMType(name, shape.num_hidden_layers));
  const ids = { Q8_0: 8, Q4_0: 2, Q4_K: 12 } as const;
  const atLoad = quantized((_, dims) => {
    const t = quantizeTarget('q4_k', dims[0]!);
    return t && ids[t as keyof typeof ids];
  });
  const plan = (tensors: StoredShape[], available = Infinity) => planMemory(config, tensors, 'float32', limits, available);
  const bf16 = floats('bfloat16');
  const widened = plan(bf16);
  // Kept as stored: the plan a machine too small for the widened copy gets.
  const kept = plan(bf16, widened.need - 1);
  console.log(`| ${label} | ${cell(plan(floats('float32')))} | ${cell(widened)} | ${cell(kept)} | ${cell(plan(q8))} | ${cell(plan(q4km))} | ${cell(plan(prepackedForInt8(q4km)))} | ${cell(plan(atLoad))} |`);
}
