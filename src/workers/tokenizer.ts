// A tokenizer worker (tokenizer-pool.ts): holds the model's tokenizer and encodes texts
// off the main thread.
import { parentPort, workerData } from 'node:worker_threads';
import { Tokenizer } from '@huggingface/tokenizers';

export interface EncodeMessage {
  id: number;
  text: string;
  addSpecialTokens: boolean;
}

export type EncodeReply = { id: number; ids: Int32Array } | { id: number; error: string };

const { json, config } = workerData as { json: ConstructorParameters<typeof Tokenizer>[0]; config: ConstructorParameters<typeof Tokenizer>[1] };
const tok = new Tokenizer(json, config);
const port = parentPort!;
port.on('message', ({ id, text, addSpecialTokens }: EncodeMessage) => {
  try {
    const ids = Int32Array.from(tok.encode(text, { add_special_tokens: addSpecialTokens }).ids);
    port.postMessage({ id, ids } satisfies EncodeReply, [ids.buffer]);
  } catch (e) {
    port.postMessage({ id, error: String((e as Error)?.message ?? e) } satisfies EncodeReply);
  }
});
