// One-off commands in this process: `score`, `probe`, `attribute` (JSON out, figures),
// each one call of the serving layer, as a client's over gRPC or HTTP is (its limits and
// checks, the batcher, the prefix cache).
import fs from 'node:fs';
import { Command, Option, InvalidArgumentError } from 'commander';
import type { ProbeSample } from '../requests/probe.js';
import { countVariants, type AttributionSample } from '../requests/attribution.js';
import {
  chunkArguments,
  entriesFrom,
  int,
  interventionList,
  serveInProcess,
  sweepList,
  textArgument,
  withModelFlags,
  writeFile,
} from './common.js';

export function registerScore(program: Command): void {
  withModelFlags(program.command('score').description('score continuations of a context (or --rolling texts) and print JSON'))
    .option('--context <text>', 'the context (@FILE: read from FILE; -: standard input)', '')
    .option('--continuation <text...>', 'one or more continuations (each may be @FILE)')
    .option('--rolling <text...>', 'texts to score with rolling log-likelihood instead (each may be @FILE, or -)')
    .option('--min-k <percent>', 'Min-K% Prob k for --rolling', parseFloat, 20)
    .option('--add-bos', 'add the tokenizer special tokens (BOS) to the text', false)
    .option('--top-k <k>', 'also print the k most likely tokens per position', int('top-k'), 0)
    .action(async (flags) => {
      if (!flags.rolling && !flags.continuation) throw new InvalidArgumentError('give --continuation TEXT… or --rolling TEXT…');
      flags.context = textArgument(flags.context, '--context');
      flags.continuation = (flags.continuation as string[] | undefined)?.map((t) => textArgument(t, '--continuation'));
      flags.rolling = (flags.rolling as string[] | undefined)?.map((t) => textArgument(t, '--rolling'));
      const [entry] = entriesFrom(flags);
      const { service, model: m, close } = await serveInProcess(entry!);
      const tok = m.engine.tokenizer;
      if (flags.rolling) {
        const results = await service.scoreRolling(
          m,
          (flags.rolling as string[]).map((text) => ({ text, minKPercent: flags.minK })),
          {},
        );
        console.log(JSON.stringify({ model: entry!.name, rolling: results }, null, 2));
      } else {
        const [results] = await service.score(
          m,
          [{ context: flags.context, continuations: flags.continuation, addBos: flags.addBos, topK: flags.topK }],
          {},
        );
        const pretty = results!.map((r, i) => {
          // Each token's text as it reads after the context (and its alternatives' in its place).
          const whole = tok.encode(`${flags.context}${flags.continuation[i]}`, flags.addBos);
          const reader = tok.pieceReader(whole.slice(0, Math.max(0, whole.length - r.tokenIds.length)));
          const topK: { id: number; token: string; logprob: number | undefined }[][] = [];
          const tokens = r.tokenIds.map((id, j) => {
            const t = r.topK?.[j];
            if (t) topK.push(t.ids.map((alt, k) => ({ id: alt, token: reader.peek(alt), logprob: t.logprobs[k] })));
            return reader.push(id);
          });
          return { continuation: flags.continuation[i], ...r, tokens, topK: r.topK ? topK : undefined };
        });
        console.log(JSON.stringify({ model: entry!.name, context: flags.context, results: pretty }, null, 2));
      }
      await close();
    });
}

export function registerProbe(program: Command): void {
  withSampleFlags(
    withModelFlags(
      program.command('probe').description('attention statistics over labelled chunks or chat messages; JSON, HTML or SVG figures'),
    ),
    'JSON: an array of samples ({chunks: [{label, text}]} or {messages: [{role, content}]}, queryLabels, excludePositions)',
    'one sample from a JSON array of chat messages (rendered with the model chat template)',
  )
    .option('--query <label...>', 'query chunk labels (default: the last chunk)')
    .option('--exclude <position...>', 'token positions to remove from the key side (e.g. 0 for a BOS sink)')
    .option('--add-special-tokens', "run the tokenizer's special tokens (BOS) on text chunks", false)
    .addOption(new Option('--pool <pool>', 'heatmap pool over layers and heads').choices(['max', 'mean']).default('max'))
    .addOption(new Option('--query-reduce <r>', 'heatmap query-side reducer').choices(['mean', 'max', 'sum']).default('mean'))
    .addOption(new Option('--key-reduce <r>', 'heatmap key-side reducer').choices(['mean', 'max', 'sum']).default('max'))
    .option('--per-head', 'include [layers × heads × chunks]', false)
    .option('--html <file>', 'write an HTML report with the figures')
    .option('--svg <prefix>', 'write PREFIX-votes.svg, PREFIX-mass.svg and PREFIX-heatmap-N.svg')
    .action(async (flags) => {
      const { probeReportHtml, distributionSvg, heatmapSvg } = await import('../eval/figures.js');
      const samples = samplesFrom<ProbeSample>(flags).map((s) => ({
        ...s,
        addSpecialTokens: s.addSpecialTokens ?? flags.addSpecialTokens,
        queryLabels: s.queryLabels ?? flags.query,
        excludePositions: s.excludePositions ?? (flags.exclude as string[] | undefined)?.map(Number),
      }));
      const [entry] = entriesFrom(flags);
      const { service, model: m, close } = await serveInProcess(entry!);
      const answer = await service.probe(
        m,
        samples,
        { pool: flags.pool, queryReduce: flags.queryReduce, keyReduce: flags.keyReduce, perHead: flags.perHead },
        {},
      );
      if (flags.html) writeFile(flags.html, probeReportHtml(answer, 'ctxprobe attention report', entry!.name));
      if (flags.svg) {
        const first = answer.mean ?? { ...answer.samples[0]!, labels: answer.samples[0]!.labels };
        writeFile(`${flags.svg}-votes.svg`, distributionSvg(first.votes, first.labels, 'Argmax votes per layer'));
        writeFile(`${flags.svg}-mass.svg`, distributionSvg(first.mass, first.labels, 'Attention mass per layer'));
        answer.samples.forEach((s, i) =>
          writeFile(`${flags.svg}-heatmap-${i}.svg`, heatmapSvg(s.heatmap, s.labels, `Sample ${i} heatmap`)),
        );
      }
      console.log(JSON.stringify({ model: entry!.name, ...answer }, null, 2));
      await close();
    });
}

export function registerAttribute(program: Command): void {
  withSampleFlags(
    withModelFlags(
      program
        .command('attribute')
        .description("what each chunk contributes to a target chunk's log-likelihood (remove / mask), as JSON; SVG bars"),
    ),
    'JSON: an array of samples ({chunks} or {messages}, target, ablate)',
    'one sample from a JSON array of chat messages',
  )
    .option('--target <label>', 'the target chunk (default: the last)')
    .option('--ablate <label...>', 'chunks to ablate (default: every chunk before the target)')
    .option('--add-special-tokens', "run the tokenizer's special tokens (BOS) on text chunks", false)
    .option('--interventions <list>', 'remove,mask (default both)', interventionList)
    .option('--keep-only', 'also: everything before the target but the ablated chunks dropped', false)
    .option('--sweep <list>', 'also: only the last h history turns kept, e.g. 0,1,2,3,all', sweepList)
    .option('--history-label <label...>', 'labels of history turns (default: history; chat: user and assistant messages)')
    .option('--subsets <n>', 'random keep/drop patterns with a least-squares fit', int('subsets'), 0)
    .option('--seed <n>', 'seed of the patterns', int('seed'), 0)
    .option('--svg <prefix>', 'write PREFIX-N.svg: Δ log-likelihood per chunk of sample N')
    .action(async (flags) => {
      const { attributionSvg } = await import('../eval/figures.js');
      const samples = samplesFrom<AttributionSample>(flags).map((s) => ({
        ...s,
        addSpecialTokens: s.addSpecialTokens ?? flags.addSpecialTokens,
        target: s.target ?? flags.target,
        ablate: s.ablate ?? flags.ablate,
      }));
      const [entry] = entriesFrom(flags);
      const { service, model: m, close } = await serveInProcess(entry!);
      const options = {
        interventions: flags.interventions,
        keepOnly: flags.keepOnly,
        historySweep: flags.sweep,
        historyLabels: flags.historyLabel,
        subsets: flags.subsets,
        seed: flags.seed,
      };
      const answers = await service.attribute(m, samples, options, {});
      // The work, as the metrics counted it (this process served this one call).
      const counted = async (counter: typeof service.metrics.tokensComputed) =>
        (await counter.get()).values.reduce((n, v) => n + v.value, 0);
      if (flags.svg) {
        answers.forEach((a, i) =>
          writeFile(
            `${flags.svg}-${i}.svg`,
            attributionSvg(
              a.chunks.map((c) => ({ label: `${c.index} ${c.label}`, values: { remove: c.remove?.delta, mask: c.mask?.delta } })),
              `Sample ${i}: Δ log-likelihood of ${a.spans[a.target]!.label} per chunk`,
              'Δ log-likelihood (nats)',
            ),
          ),
        );
      }
      console.log(
        JSON.stringify(
          {
            model: entry!.name,
            variants: countVariants(samples, options).total,
            tokensComputed: await counted(service.metrics.tokensComputed),
            tokensRequested: await counted(service.metrics.tokensRequested),
            samples: answers,
          },
          null,
          2,
        ),
      );
      await close();
    });
}

/** `--samples FILE`, `--chunk label=text…` and `--messages FILE`: where a probe's or an
 * attribution's samples come from (read by `samplesFrom`). */
function withSampleFlags(cmd: Command, samplesHelp: string, messagesHelp: string): Command {
  return cmd
    .option('--samples <file>', samplesHelp)
    .option('--chunk <label=text...>', 'one sample from inline chunks, in order (label=@FILE reads the text from FILE)')
    .option('--messages <file>', messagesHelp);
}

/** The samples the flags give: --samples (a JSON array, or an object with `samples`), else
 * one from --messages, else one from --chunk. */
function samplesFrom<S>(flags: { samples?: string; messages?: string; chunk?: string[] }): S[] {
  if (flags.samples) {
    const raw = JSON.parse(fs.readFileSync(flags.samples, 'utf8'));
    return Array.isArray(raw) ? raw : raw.samples;
  }
  if (flags.messages) return [{ messages: JSON.parse(fs.readFileSync(flags.messages, 'utf8')) } as S];
  if (flags.chunk) return [{ chunks: chunkArguments(flags.chunk) } as S];
  throw new InvalidArgumentError('give --samples FILE, --messages FILE or --chunk label=text…');
}
