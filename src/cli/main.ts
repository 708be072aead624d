// ctxprobe command line: `serve` and `health` (src/cli/serve.ts), one-off `score`,
// `probe` and `attribute` (src/cli/one-off.ts), and the research workflows under `eval`
// (src/cli/eval.ts).
import { Command } from 'commander';
import { log } from './common.js';
import { addServeCommands } from './serve.js';
import { addOneOffCommands } from './one-off.js';
import { addEvalCommands } from './eval.js';

const program = new Command('ctxprobe').description('Log-likelihoods and attention statistics of causal LMs, served over gRPC');
addServeCommands(program);
addOneOffCommands(program);
addEvalCommands(program);

program.parseAsync().catch((err) => {
  log({ level: 'error', message: (err as Error).message });
  process.exit(1);
});
