// `ctxprobe generate`: the model writes, in this process, through the serving layer's
// Generate as a client's call does (its checks; each step a unit of the one scheduler, the
// prefix cache carrying the KV). JSON out, or the text as it comes with --stream.
import fs from 'node:fs';
import { Command, InvalidArgumentError } from 'commander';
import type { SamplingParams } from '../requests/sampling.js';
import { chunkArguments, entriesFrom, int, serveInProcess, textArgument, withModelFlags } from './common.js';

const number = (name: string) => (value: string) => {
  const n = Number(value);
  if (!Number.isFinite(n)) throw new InvalidArgumentError(`${name} must be a number`);
  return n;
};

export function registerGenerate(program: Command): void {
  withModelFlags(program.command('generate').description('generate from a prompt (text, labelled chunks or chat messages) and print JSON'))
    .option('--prompt <text>', 'the prompt text (@FILE: read from FILE; -: standard input)')
    .option('--chunk <label=text...>', 'the prompt as labelled chunks, in order (label=@FILE reads FILE)')
    .option('--messages <file>', "a JSON array of chat messages, rendered with the model's chat template and the assistant's turn opened")
    .option('--no-special-tokens', "do not run the tokenizer's special tokens (BOS) on a text prompt")
    .option('--max-tokens <n>', 'tokens to generate per choice', int('max-tokens'), 64)
    .option('--temperature <t>', '0: greedy', number('temperature'), 0)
    .option('--top-p <p>', 'nucleus sampling', number('top-p'), 1)
    .option('--top-k <k>', 'the k most likely tokens only (0: off)', int('top-k'), 0)
    .option('--min-p <p>', 'tokens at least p times as likely as the most likely (0: off)', number('min-p'), 0)
    .option('--seed <n>', 'same seed, same text', int('seed'))
    .option('--stop <text...>', 'strings that end a choice (not returned)')
    .option('-n, --choices <n>', 'choices', int('choices'), 1)
    .option('--logprobs <n>', 'alternatives per generated token', int('logprobs'), 0)
    .option('--attention', 'per generated token: votes and mass per layer over the prompt chunks and the response', false)
    .option('--exclude <position...>', 'prompt positions left out of the attention keys (e.g. 0 for a BOS sink)')
    .option('--stream', 'print the text as it is generated (one choice), not JSON', false)
    .action(async (flags) => {
      const given = [flags.prompt, flags.chunk, flags.messages].filter((x) => x !== undefined).length;
      if (given !== 1) throw new InvalidArgumentError('give one of --prompt TEXT, --chunk label=text… or --messages FILE');
      if (flags.stream && flags.choices > 1) throw new InvalidArgumentError('--stream prints one choice: leave out -n');
      const sample = {
        ...(flags.prompt !== undefined
          ? { chunks: [{ label: 'prompt', text: textArgument(flags.prompt, '--prompt') }], addSpecialTokens: flags.specialTokens }
          : {}),
        ...(flags.chunk ? { chunks: chunkArguments(flags.chunk), addSpecialTokens: flags.specialTokens } : {}),
        ...(flags.messages ? { messages: JSON.parse(fs.readFileSync(flags.messages, 'utf8')), addGenerationPrompt: true } : {}),
        excludePositions: (flags.exclude as string[] | undefined)?.map(Number),
      };
      const params: SamplingParams = {
        temperature: flags.temperature,
        topP: flags.topP,
        topK: flags.topK,
        minP: flags.minP,
        ...(flags.seed !== undefined ? { seed: flags.seed } : {}),
        maxTokens: flags.maxTokens,
        stop: flags.stop ?? [],
        n: flags.choices,
        logprobs: flags.logprobs,
      };
      const [entry] = entriesFrom(flags);
      const { service, model: m, close } = await serveInProcess(entry!);
      try {
        const prompt = await service.preparePrompt(m, sample, 'prompt');
        const [choices] = await service.generate(
          m,
          [prompt.ids],
          params,
          {},
          flags.stream ? (_, events) => events.forEach((e) => process.stdout.write(e.text)) : undefined,
          flags.attention ? [prompt.bins] : undefined,
        );
        if (flags.stream) process.stdout.write('\n');
        else {
          const labels = [...prompt.segments.map((s) => s.label), 'response'];
          console.log(
            JSON.stringify(
              {
                model: entry!.name,
                prompt: { ids: prompt.ids, spans: prompt.segments },
                ...(flags.attention ? { attentionLabels: labels } : {}),
                choices,
              },
              null,
              2,
            ),
          );
        }
      } finally {
        await close();
      }
    });
}
