// `ctxprobe eval …`: research workflows, clients of a server (given, or started here).
import fs from 'node:fs';
import { Command, Option } from 'commander';
import { int, interventionList, log, sweepList } from './common.js';

export function registerEval(program: Command): void {
  const evalCmd = program
    .command('eval')
    .description('research workflows: CHARPEval, RefuteBench-style attention, chunk attribution, contamination checks');
  registerCharpeval(evalCmd);
  registerRefute(evalCmd);
  registerEvalAttribute(evalCmd);
  registerContamination(evalCmd);
}

/** The flags of every runner: the server to use (or the model of the one started here), and where results go. */
function withConnection(cmd: Command): Command {
  return cmd
    .addOption(new Option('--server <host:port>', 'a running ctxprobe server (default: start one here on --model)').env('CTXPROBE_SERVER'))
    .addOption(
      new Option('--model <path>', 'checkpoint folder or GGUF file for the server started here (default: the default model)').env(
        'CTXPROBE_MODEL',
      ),
    )
    .option('--model-name <name>', 'which served model to use (default: the server default)')
    .addOption(new Option('--threads <n>', 'CPU threads of the server started here').argParser(int('threads')))
    .addOption(new Option('--token-file <file>', 'bearer token for --server').env('CTXPROBE_TOKEN_FILE'))
    .addOption(new Option('--tls-ca <file>', 'CA to verify a TLS --server').env('CTXPROBE_TLS_CA'))
    .option('--out <dir>', 'where results.json, report.md and figures go');
}

/** A client of the --server given, or of a server started here on --model. */
async function connect(flags: { server?: string; model?: string; threads?: number; tokenFile?: string; tlsCa?: string }) {
  const { EvalClient } = await import('../eval/client.js');
  const token = flags.tokenFile ? fs.readFileSync(flags.tokenFile, 'utf8').split('\n')[0]!.trim() : undefined;
  return EvalClient.connect({ server: flags.server, model: flags.model, threads: flags.threads, token, tlsCa: flags.tlsCa });
}

/** Each file into `dir` (made if need be), and a log line that says so. */
async function writeOutputs(dir: string, files: Record<string, string>) {
  const path = await import('node:path');
  fs.mkdirSync(dir, { recursive: true });
  for (const [name, content] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), content);
  log({ level: 'info', event: 'written', dir, files: Object.keys(files) });
}

function registerCharpeval(evalCmd: Command): void {
  withConnection(
    evalCmd
      .command('charpeval <data>')
      .description('6-way response selection (acc, acc_norm, top-ranked type), optionally with the attention analysis'),
  )
    .option('--shots <k>', 'few-shot demonstrations between the instruction and the sample', int('shots'), 0)
    .option('--demos <file>', 'demonstrations (JSONL, same format; default: other samples of the data)')
    .option('--attention', 'also the per-layer chunk distribution of the response tokens (Appendix C.1)', false)
    .action(async (data: string, flags) => {
      const { runCharpeval, charpMarkdown } = await import('../eval/charpeval.js');
      const { readJsonl } = await import('../eval/client.js');
      const { distributionSvg } = await import('../eval/figures.js');
      const client = await connect(flags);
      try {
        const report = await runCharpeval(client, readJsonl(data), {
          shots: flags.shots,
          demos: flags.demos ? readJsonl(flags.demos) : undefined,
          attention: flags.attention,
          model: flags.modelName,
        });
        const files: Record<string, string> = { 'results.json': JSON.stringify(report, null, 2), 'report.md': charpMarkdown(report) };
        if (report.attention) {
          files['attention-votes.svg'] = distributionSvg(
            report.attention.votes,
            report.attention.labels,
            `CHARPEval: response-token attention argmax per layer (${report.model})`,
          );
          files['attention-mass.svg'] = distributionSvg(
            report.attention.mass,
            report.attention.labels,
            `CHARPEval: response-token attention mass per layer (${report.model})`,
          );
        }
        await writeOutputs(flags.out ?? 'eval-out/charpeval', files);
        console.log(charpMarkdown(report));
      } finally {
        await client.close();
      }
    });
}

function registerRefute(evalCmd: Command): void {
  withConnection(
    evalCmd
      .command('refute <dialogues>')
      .description("round heatmaps per dialogue and averaged, and the last response's attention per round"),
  )
    .option('--plain', 'render messages as "Role: content" instead of the model chat template', false)
    .addOption(new Option('--pool <pool>', 'pool over layers and heads').choices(['max', 'mean']).default('max'))
    .option('--generate', "play each dialogue with the model's own responses (one per user turn), then probe it", false)
    .option('--max-tokens <n>', 'with --generate: tokens per response', int('max-tokens'), 64)
    .option('--temperature <t>', 'with --generate: 0 is greedy', parseFloat, 0)
    .option('--seed <n>', 'with --generate: sampling seed', int('seed'))
    .action(async (file: string, flags) => {
      const { runRefute, refuteMarkdown, playDialogues } = await import('../eval/refute.js');
      const { readJsonl } = await import('../eval/client.js');
      const { heatmapSvg } = await import('../eval/figures.js');
      const client = await connect(flags);
      try {
        if (flags.generate && flags.plain) throw new Error('--generate renders with the chat template: leave out --plain');
        let dialogues: import('../eval/refute.js').Dialogue[] = readJsonl(file);
        if (flags.generate) {
          dialogues = await playDialogues(client, dialogues, {
            model: flags.modelName,
            maxTokens: flags.maxTokens,
            temperature: flags.temperature,
            ...(flags.seed !== undefined ? { seed: flags.seed } : {}),
          });
        }
        const report = await runRefute(client, dialogues, { plain: flags.plain, pool: flags.pool, model: flags.modelName });
        const files: Record<string, string> = { 'results.json': JSON.stringify(report, null, 2), 'report.md': refuteMarkdown(report) };
        if (flags.generate) files['dialogues.jsonl'] = dialogues.map((d) => JSON.stringify(d)).join('\n') + '\n';
        report.dialogues.forEach(
          (d, i) =>
            (files[`heatmap-${i}.svg`] = heatmapSvg(
              d.heatmap,
              d.labels,
              `Dialogue ${d.id}: attention between rounds (${report.pool} pool)`,
            )),
        );
        if (report.meanHeatmap) {
          files['heatmap-mean.svg'] = heatmapSvg(
            report.meanHeatmap.values,
            report.meanHeatmap.labels,
            `Mean of ${report.meanHeatmap.dialogues} dialogues (${report.pool} pool)`,
          );
        }
        await writeOutputs(flags.out ?? 'eval-out/refute', files);
        console.log(refuteMarkdown(report));
      } finally {
        await client.close();
      }
    });
}

function registerEvalAttribute(evalCmd: Command): void {
  withConnection(
    evalCmd
      .command('attribute <data>')
      .description(
        "what each chunk contributes to the target's log-likelihood (remove / mask), per sample and per label, with CHARP's history sweep",
      ),
  )
    .option('--interventions <list>', 'remove,mask (default both)', interventionList)
    .option('--sweep <list>', 'only the last h history turns kept, e.g. 0,1,2,3,all (CHARP §3.5)', sweepList)
    .option('--batch <n>', 'samples per call', int('batch'), 4)
    .action(async (file: string, flags) => {
      const { runAttribute, attributeMarkdown } = await import('../eval/attribute.js');
      const { readJsonl } = await import('../eval/client.js');
      const { attributionSvg, figuresHtml } = await import('../eval/figures.js');
      const client = await connect(flags);
      try {
        const report = await runAttribute(client, readJsonl(file), {
          interventions: flags.interventions,
          sweep: flags.sweep,
          model: flags.modelName,
          batch: Math.max(1, flags.batch),
        });
        const unit = 'Δ log-likelihood of the target (nats)';
        const figures: Record<string, string> = {
          'attribution-mean.svg': attributionSvg(
            report.meanByLabel.map((m) => ({ label: `${m.label} (${m.chunks})`, values: { remove: m.remove, mask: m.mask } })),
            `Mean Δ per chunk label over ${report.samples.length} samples (${report.model})`,
            unit,
          ),
        };
        report.samples.forEach(
          (s, i) =>
            (figures[`attribution-${i}.svg`] = attributionSvg(
              s.chunks.map((c) => ({ label: `${c.index} ${c.label}`, values: { remove: c.remove, mask: c.mask } })),
              `Sample ${s.id}: Δ per chunk (target ${s.target})`,
              unit,
            )),
        );
        await writeOutputs(flags.out ?? 'eval-out/attribute', {
          'results.json': JSON.stringify(report, null, 2),
          'report.md': attributeMarkdown(report),
          ...figures,
          'report.html': figuresHtml(
            `Chunk attribution — ${report.model}`,
            `${report.samples.length} samples; interventions: ${report.interventions.join(', ')}`,
            Object.values(figures),
          ),
        });
        console.log(attributeMarkdown(report));
      } finally {
        await client.close();
      }
    });
}

function registerContamination(evalCmd: Command): void {
  withConnection(
    evalCmd.command('contamination').description('mean LM loss and Min-K% Prob of two text sets, their difference and ROC AUC'),
  )
    .requiredOption('--a <file>', 'set A (JSONL with "text", or one text per line)')
    .requiredOption('--b <file>', 'set B')
    .option('--min-k <percent>', 'Min-K% Prob k', parseFloat, 20)
    .action(async (flags) => {
      const { runContamination, contaminationMarkdown, readTexts } = await import('../eval/contamination.js');
      const client = await connect(flags);
      try {
        const report = await runContamination(client, readTexts(flags.a), readTexts(flags.b), {
          minKPercent: flags.minK,
          model: flags.modelName,
        });
        await writeOutputs(flags.out ?? 'eval-out/contamination', {
          'results.json': JSON.stringify(report, null, 2),
          'report.md': contaminationMarkdown(report),
        });
        console.log(contaminationMarkdown(report));
      } finally {
        await client.close();
      }
    });
}
