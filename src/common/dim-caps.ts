// The largest dimensions a model may declare: the config reader (model/config-values.ts)
// and the GGUF reader (checkpoint/gguf-arch.ts, which loops over a file's experts) check
// every declared size against them before anything is sized by it.

/** The largest dimension of each kind a config may ask for: several times the largest
 * real ones (Llama 3.1 405B: hidden 16384, 126 layers, 128 heads, MLP 53248; Gemma 2/3:
 * head_dim 256 and 262144 tokens; DeepSeek-V3: 256 experts; Llama 4: 10M positions).
 * A value past these is not a model but a way to make the loader allocate without end;
 * refused by arithmetic before anything is built (the rotary tables alone are
 * positions × head_dim × 8 bytes). Tensor shapes are compared with the config after
 * (config-checks.ts). */
export const DIM_CAPS = {
  hidden: 65536,
  layers: 1024,
  heads: 1024,
  headDim: 1024,
  intermediate: 1 << 20,
  vocab: 1 << 22,
  maxPositions: 1 << 28,
  experts: 4096,
} as const;
