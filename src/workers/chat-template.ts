// A model's chat template process (src/text/chat-template-host.ts forks it): compiles the
// template once, then renders one conversation at a time under the bounds it is sent. A
// process, not a worker thread: a worker's heap limit does not contain a hostile template —
// `{% set x = range(1000000000) %}` in a worker with a 128, 200 or 512 MiB limit aborted
// the whole server ("FATAL ERROR: Reached heap limit", Node gives a worker 16 MiB of
// leeway past its limit and one array growth asks for more), and with 1 GiB V8's "invalid
// size error" trapped it. Here that ends this process only.
import { compileTemplate, outputLimit, renderTemplate, type CompiledTemplate, type RenderResult } from '../text/chat-template.js';

export type TemplateRequest = { type: 'compile'; text: string } | { type: 'render'; args: Record<string, unknown>; timeMs: number };

export type TemplateReply = { type: 'compiled' } | { type: 'compile_failed'; message: string } | ({ type: 'rendered' } & RenderResult);

// It leaves with the server: signals sent to the server's process group (a terminal's ^C)
// are the server's to act on (it drains, then ends this process), and a server that is
// gone closes the channel.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, () => {});
process.on('disconnect', () => process.exit(0));

let template: CompiledTemplate | undefined;
const reply = (r: TemplateReply) => process.send!(r);

process.on('message', (req: TemplateRequest) => {
  if (req.type === 'compile') {
    try {
      template = compileTemplate(req.text);
      reply({ type: 'compiled' });
    } catch (e) {
      reply({ type: 'compile_failed', message: String((e as Error)?.message ?? e) });
    }
    return;
  }
  if (!template) return reply({ type: 'rendered', failure: { kind: 'stopped', message: 'has not been compiled' } });
  // The output bound is measured here, off the server's event loop.
  reply({ type: 'rendered', ...renderTemplate(template, req.args, { timeMs: req.timeMs, outputChars: outputLimit(req.args) }) });
});
