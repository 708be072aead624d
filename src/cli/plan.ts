// `ctxprobe plan --model X`: how a model's weights would lie, without loading it — the weight
// plan (engine/weights-plan.ts) as a table, or as JSON: each weight's stored type and shape,
// its form at rest, its bytes at rest and in a pass, where it lives, and what the model needs
// of the memory there is. The same flags as `serve` decide it.
import { Command, Option } from 'commander';
import { entriesFrom, withModelFlags } from './common.js';
import { engineOptionsOf, ensureCheckpoint } from '../serving/repository.js';
import { planModel, planTable } from '../engine/weights-plan.js';

export function registerPlan(program: Command): void {
  withModelFlags(
    program
      .command('plan')
      .description(
        "how a model's weights would lie and what it needs in memory, without loading it: a table of its weights (--json: the plan as data)",
      )
      .addOption(new Option('--models <dir>', 'model repository').env('CTXPROBE_MODELS'))
      .option('--json', 'print the plan as JSON'),
  ).action((flags) => {
    for (const entry of entriesFrom(flags)) {
      ensureCheckpoint(entry);
      const plan = planModel(entry.path, engineOptionsOf(entry));
      console.log(flags.json ? JSON.stringify({ name: entry.name, ...plan }, null, 2) : planTable(plan));
    }
  });
}
