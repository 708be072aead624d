// A checkpoint's chat template: compiled with @huggingface/jinja, rendered under bounds, its
// failures told apart. This is the part that runs where the template runs: in the template's
// own process (src/workers/chat-template.ts, started by chat-template-host.ts) for every
// request, and on the calling thread only for the in-thread `renderChatText` that tests use.
//
// @huggingface/jinja's sandbox is left as it is (what a template may call and read). The
// library has no hook for its output or its time, so one is added around its public
// `Interpreter.prototype.evaluate`, through which every statement and expression passes:
// while a bounded render runs it counts what each `for` loop and the template's top level
// accumulate (a loop's output is the sum of its body's statements' outputs, iteration after
// iteration) and refuses any string over the bound as soon as it exists; it checks the clock
// on every loop and every 256th evaluation; and it tells a template's own
// `raise_exception(…)` (a conversation the template refuses on purpose) from any other
// failure. Outside a bounded render the hook passes straight through, and it is installed in
// a process only when that process first renders.
import path from 'node:path';
import { Interpreter, Template } from '@huggingface/jinja';
import { CheckpointError, InvalidArgumentError, type CtxprobeError } from '../common/errors.js';

export type CompiledTemplate = Template;

/** Where a checkpoint's template comes from: its file, and its name in a named list. */
export interface TemplateOrigin {
  file: string;
  name?: string;
}

/** `chat_template.jinja`, or `tokenizer_config.json chat_template "default"`: the template
 * as a client's error names it (the file's folder stays on the server). */
export function describeTemplate(origin: TemplateOrigin): string {
  const file = path.basename(origin.file);
  if (file.endsWith('.jinja')) return file;
  return `${file} chat_template${origin.name === undefined ? '' : ` ${JSON.stringify(origin.name)}`}`;
}

/** The bounds of one render and of a compilation. */
export const TEMPLATE_BOUNDS = {
  /** Wall-clock time of one render: this, plus renderMsPerMessage a message. The real
   * templates of test/chat-templates/ render a conversation of a few messages in well under
   * a millisecond, 8 MiB of text in 8 messages in 40-130 ms, and 20,000 short messages
   * (more than any context holds) in 0.4-2.2 s: their loops cost 35-110 µs a message here
   * (2 shared cores). What a hostile template costs is this much of its own process's time
   * per request; the server's event loop waits for none of it. */
  renderMs: 2000,
  renderMsPerMessage: 0.25,
  /** Wall-clock time of a compilation (at load, and after a render's process was
   * replaced): a dense 5 MiB template parses in ~2 s here, a real one in milliseconds. */
  compileMs: 30_000,
  /** V8 old-space heap of the template's process, where V8 aborts it: the arguments of an
   * 8 MiB request, an output bound of ~34M characters and a several-MiB template's syntax
   * tree (a dense 5 MiB template: 157 MiB) fit. `range(1000000000)` would reach it in ~5 s
   * here (peak RSS 1 GiB); the time bound ends it first. */
  heapMb: 512,
  /** Output characters: this many, plus outputPerArgumentChar for each character of the
   * render's arguments as JSON (the messages, the template arguments); any string the
   * template builds is held to it too. 1 MiB leaves a template ~100 characters of markup a
   * message for 10,000 messages. */
  outputBase: 1 << 20,
  /** The real templates write at most 2.3x their arguments' JSON for a tiny conversation
   * (Llama 3.3: a default system header) and ~1.0x for a long one. */
  outputPerArgumentChar: 4,
};

/** Milliseconds a render with these arguments may take. */
export function renderTime(args: Record<string, unknown>, bounds = TEMPLATE_BOUNDS): number {
  const messages = Array.isArray(args.messages) ? args.messages.length : 0;
  return Math.ceil(bounds.renderMs + bounds.renderMsPerMessage * messages);
}

/** Output characters a render with these arguments may write. */
export function outputLimit(args: Record<string, unknown>): number {
  return TEMPLATE_BOUNDS.outputBase + TEMPLATE_BOUNDS.outputPerArgumentChar * JSON.stringify(args).length;
}

/** How a render failed: `rejected` (the template's own raise_exception: the client's
 * conversation is what it refuses), `arguments` (the client's template arguments clash
 * with the template's globals), or the template's fault: `error`, `time`, `output`,
 * `memory`, `stopped` (its process ended otherwise). */
export interface TemplateFailure {
  kind: 'rejected' | 'arguments' | 'error' | 'time' | 'output' | 'memory' | 'stopped';
  message: string;
}

export type RenderResult = { text: string } | { failure: TemplateFailure };

/** Parse a template (throws the parser's error). */
export function compileTemplate(text: string): CompiledTemplate {
  return new Template(text);
}

/** What a chat template is given: the tokenizer's BOS and EOS, the client's template
 * arguments, the messages and the generation prompt flag (these last win). */
export function templateArguments(
  config: Record<string, any>,
  messages: { role: string; content: string }[],
  options: { addGenerationPrompt?: boolean; kwargs?: Record<string, unknown> },
): Record<string, unknown> {
  const special = (name: string) => {
    const v = config[name];
    return typeof v === 'string' ? v : (v?.content ?? '');
  };
  return {
    bos_token: special('bos_token'),
    eos_token: special('eos_token'),
    ...options.kwargs,
    messages,
    add_generation_prompt: options.addGenerationPrompt ?? false,
  };
}

// The interpreter's shapes, as far as the hook reads them (the package's own declarations
// do not resolve under this project's module resolution).
interface Statement {
  type: string;
}
interface Value {
  type: string;
  value: unknown;
  toString(): string;
}
interface Scope {
  lookupVariable(name: string): Value;
}
interface Evaluator {
  evaluate(statement: Statement | undefined, scope: Scope): Value;
}

/** One bounded render under way. */
interface Render {
  outputChars: number;
  deadline: number;
  timeMs: number;
  evaluations: number;
  /** Accumulating blocks: the template's top level and each running `for` loop, with the
   * statements whose outputs they join and the characters joined so far. */
  frames: { children: Set<Statement>; chars: number }[];
  /** The builtin raise_exception of this render's globals, once the first statement runs. */
  raise?: Value;
  /** The bound this render crossed, once it has: the error thrown to stop the interpreter
   * says no more than that the template failed. */
  crossed?: TemplateFailure;
  /** The innermost statement each thrown error came out of. */
  origins: WeakMap<object, Statement>;
  rejections: WeakSet<object>;
}

let active: Render | undefined;
let hooked = false;
const loopChildren = new WeakMap<Statement, Set<Statement>>();

function childrenOf(loop: Statement): Set<Statement> {
  let set = loopChildren.get(loop);
  if (!set) {
    const { body, defaultBlock } = loop as unknown as { body: Statement[]; defaultBlock: Statement[] };
    loopChildren.set(loop, (set = new Set([...body, ...defaultBlock])));
  }
  return set;
}

function checkOutput(r: Render, statement: Statement, value: Value): void {
  if (value.type === 'StringValue' && (value.value as string).length > r.outputChars) throw crossed(r, outputCrossed(r));
  const frame = r.frames.at(-1);
  if (!frame?.children.has(statement) || value.type === 'NullValue' || value.type === 'UndefinedValue') return;
  frame.chars += value.type === 'StringValue' ? (value.value as string).length : value.toString().length;
  if (frame.chars > r.outputChars) throw crossed(r, outputCrossed(r));
}

const outputCrossed = (r: Render): TemplateFailure => ({
  kind: 'output',
  message: `wrote more than ${r.outputChars} characters (the bound for these arguments)`,
});

/** Record that `r` crossed a bound, and the error that stops the interpreter: the
 * template's fault, as templateError names it. */
function crossed(r: Render, failure: TemplateFailure): CheckpointError {
  r.crossed = failure;
  return new CheckpointError(failure.message);
}

/** Whether an error thrown out of `statement` is the template's raise_exception itself (not
 * one of its arguments failing, not another function). */
function isRaise(r: Render, statement: Statement, scope: Scope, err: object): boolean {
  if (statement.type !== 'CallExpression' || r.origins.get(err) !== statement) return false;
  const callee = (statement as unknown as { callee: { type: string; value: unknown } }).callee;
  return callee.type === 'Identifier' && r.raise !== undefined && scope.lookupVariable(callee.value as string) === r.raise;
}

function installHook(): void {
  if (hooked) return;
  hooked = true;
  const proto = Interpreter.prototype as unknown as Evaluator;
  const evaluate = proto.evaluate;
  proto.evaluate = function (this: Evaluator, statement: Statement | undefined, scope: Scope): Value {
    const r = active;
    if (!r || !statement) return evaluate.call(this, statement, scope);
    r.raise ??= scope.lookupVariable('raise_exception');
    const loop = statement.type === 'For';
    if ((loop || (++r.evaluations & 255) === 0) && performance.now() > r.deadline)
      throw crossed(r, { kind: 'time', message: `did not finish within ${seconds(r.timeMs)}` });
    if (loop) r.frames.push({ children: childrenOf(statement), chars: 0 });
    let value: Value;
    try {
      value = evaluate.call(this, statement, scope);
    } catch (err) {
      if (typeof err === 'object' && err !== null) {
        if (!r.origins.has(err)) r.origins.set(err, statement);
        if (isRaise(r, statement, scope, err)) r.rejections.add(err);
      }
      throw err;
    } finally {
      if (loop) r.frames.pop();
    }
    checkOutput(r, statement, value);
    return value;
  };
}

/** Render `template` with `args`, within `bounds` (none: unbounded, as the in-thread
 * renderer of tests). Never throws: a failure comes back classified. */
export function renderTemplate(
  template: CompiledTemplate,
  args: Record<string, unknown>,
  bounds?: { timeMs: number; outputChars: number },
): RenderResult {
  installHook();
  const r: Render = {
    outputChars: bounds?.outputChars ?? Infinity,
    timeMs: bounds?.timeMs ?? Infinity,
    deadline: performance.now() + (bounds?.timeMs ?? Infinity),
    evaluations: 0,
    frames: [{ children: new Set<Statement>(template.parsed.body), chars: 0 }],
    origins: new WeakMap(),
    rejections: new WeakSet(),
  };
  const outer = active;
  active = r;
  try {
    const text = template.render(args);
    return text.length > r.outputChars ? { failure: outputCrossed(r) } : { text };
  } catch (e) {
    return { failure: classify(r, e) };
  } finally {
    active = outer;
  }
}

export const seconds = (ms: number) => `${+(ms / 1000).toFixed(1)} s`;

function classify(r: Render, e: unknown): TemplateFailure {
  if (r.crossed) return r.crossed;
  const message = String((e as Error)?.message ?? e);
  if (typeof e === 'object' && e !== null && r.rejections.has(e)) return { kind: 'rejected', message };
  // Thrown before the first statement ran: the globals refused an argument's name.
  if (r.raise === undefined) return { kind: 'arguments', message };
  if (e instanceof RangeError && /string length|array length/i.test(message))
    return { kind: 'output', message: `built a value larger than JavaScript allows (${message})` };
  return { kind: 'error', message: `fails: ${message}` };
}

/** The error a failed render answers with: a conversation the template refuses, or
 * arguments it cannot take, are the client's (INVALID_ARGUMENT, as before templates were
 * contained); anything else is the checkpoint's template failing (FAILED_PRECONDITION),
 * named by `where` (describeTemplate). */
export function templateError(field: string, where: string, failure: TemplateFailure): CtxprobeError {
  if (failure.kind === 'rejected')
    return new InvalidArgumentError(field, `the chat template cannot render these messages: ${failure.message}`);
  if (failure.kind === 'arguments')
    return new InvalidArgumentError(
      field,
      `the chat template cannot render these messages: its arguments clash with its globals (${failure.message})`,
    );
  return new CheckpointError(`${field}: the model's chat template (${where}) ${failure.message}`);
}
