// The API's Generation handler: a prompt sample and sampling options translated to the serving
// layer's generate call (every step a unit of the model's one scheduler), one message per
// generated token as it is made.
import { InvalidArgumentError } from '../common/errors.js';
import type { TokenEvent } from '../requests/generate.js';
import type { SamplingParams } from '../requests/sampling.js';
import type { Service } from '../serving/service.js';
import type { GenerationHandlers } from './generated/ctxprobe/v1/Generation.js';
import type { GenerateResponse } from './generated/ctxprobe/v1/GenerateResponse.js';
import type { SamplingOptions__Output } from './generated/ctxprobe/v1/SamplingOptions.js';
import { matrix, serverStream, type Methods } from './method-kinds.js';
import { toSample } from './probing.js';

export function generationMethods(service: Service): Methods<GenerationHandlers> {
  return {
    Generate: serverStream(async (req, context, write) => {
      const m = service.model(req.model);
      if (!req.prompt) throw new InvalidArgumentError('prompt', 'required');
      const prompt = await service.preparePrompt(m, toSample(req.prompt, 'prompt'), 'prompt');
      const params = sampling(req.sampling);
      service.checkGenerate(m, [prompt.ids], params);
      const first = new Set<number>();
      const message = (e: TokenEvent): GenerateResponse => {
        const head = !first.has(e.choice);
        first.add(e.choice);
        return {
          choice: e.choice,
          tokenId: e.token,
          logprob: e.logprob,
          top: e.top ? e.top.ids.map((id, k) => ({ id, logprob: e.top!.logprobs[k]! })) : [],
          text: e.text,
          finishReason: e.finish ?? '',
          ...(e.attention
            ? {
                votes: matrix(e.attention.votes),
                votesExcluded: e.attention.votesExcluded,
                mass: matrix(e.attention.mass),
                massExcluded: e.attention.massExcluded,
              }
            : {}),
          ...(head
            ? { spans: prompt.segments.map((s) => ({ label: s.label, start: s.start, end: s.end })), promptTokens: prompt.ids.length }
            : {}),
        };
      };
      await service.generate(
        m,
        [prompt.ids],
        params,
        context,
        (_, events) => {
          for (const e of events) write(message(e));
        },
        req.attention ? [prompt.bins] : undefined,
      );
    }),
  };
}

/** Sampling options with the proto's zero values as "unset". */
function sampling(s: SamplingOptions__Output | null): SamplingParams {
  return {
    temperature: s?.temperature ?? 0,
    // 0 is proto3's unset; anything else (NaN from JSON's "NaN" included) is checked.
    topP: s?.topP === undefined || s.topP === 0 ? 1 : s.topP,
    topK: s?.topK ?? 0,
    minP: s?.minP ?? 0,
    ...(s?.seed ? { seed: Number(s.seed.value) } : {}),
    maxTokens: s?.maxTokens || 16,
    stop: s?.stop ?? [],
    n: s?.n || 1,
    logprobs: s?.logprobs ?? 0,
    ignoreEos: s?.ignoreEos ?? false,
  };
}
