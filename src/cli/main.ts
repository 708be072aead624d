// ctxprobe command line: `serve` and `health` (src/cli/serve.ts), `plan` (src/cli/plan.ts), one-off `score`,
// `probe` and `attribute` (src/cli/one-off.ts), `generate` (src/cli/generate.ts), and the research workflows under `eval`
// (src/cli/eval.ts). One registration per command, in the order help lists them.
import { Command } from 'commander';
import { log } from './common.js';
import { registerHealth, registerServe } from './serve.js';
import { registerAttribute, registerProbe, registerScore } from './one-off.js';
import { registerEval } from './eval.js';
import { registerGenerate } from './generate.js';
import { registerPlan } from './plan.js';

const program = new Command('ctxprobe').description(
  'Log-likelihoods, attention statistics and generations of causal LMs, served over gRPC and HTTP',
);
registerServe(program);
registerHealth(program);
registerPlan(program);
registerScore(program);
registerProbe(program);
registerAttribute(program);
registerGenerate(program);
registerEval(program);

program.parseAsync().catch((err) => {
  log({ level: 'error', message: (err as Error).message });
  process.exit(1);
});
