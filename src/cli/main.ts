// ctxprobe command line: `serve` and `health` (src/cli/serve.ts), one-off `score`,
// `probe` and `attribute` (src/cli/one-off.ts), `generate` (src/cli/generate.ts), and the research workflows under `eval`
// (src/cli/eval.ts).
import { Command } from 'commander';
import { log } from './common.js';
import { addServeCommands } from './serve.js';
import { addOneOffCommands } from './one-off.js';
import { addEvalCommands } from './eval.js';
import { addGenerateCommand } from './generate.js';

const program = new Command('ctxprobe').description(
  'Log-likelihoods, attention statistics and generations of causal LMs, served over gRPC and HTTP',
);
addServeCommands(program);
addOneOffCommands(program);
addGenerateCommand(program);
addEvalCommands(program);

program.parseAsync().catch((err) => {
  log({ level: 'error', message: (err as Error).message });
  process.exit(1);
});
