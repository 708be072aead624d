// A checkpoint's chat template is the checkpoint's code: these tests serve hostile ones and
// check that the server stays whole. Before templates were contained (the event loop,
// unbounded): a nested range(100000) loop kept /health from answering and SIGTERM from
// draining, range(1000000000) aborted the server, a 5e9-character output held the loop
// 44 s, a template that did not parse was a 400 on every request, and a large template was
// parsed again for each one.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel } from '../src/serving/repository.js';
import { ChatTemplateProcess } from '../src/text/chat-template-host.js';
import { TEMPLATE_BOUNDS, compileTemplate, renderTemplate } from '../src/text/chat-template.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { client, healthClient, postJson, serveModel, unary } from './helpers.js';
import { ROOT, serveCli, type Served } from './cli-serve.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const NESTED = '{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}';
const HUGE_RANGE = '{% set x = range(1000000000) %}{{ messages[0].content }}';
/** 5,000 copies of a 1,048,576-character string: 5.2e9 characters. */
const OUTPUT_5E9 =
  "{% set ns = namespace(v='x') %}{% for i in range(20) %}{% set ns.v = ns.v ~ ns.v %}{% endfor %}{% for i in range(5000) %}{{ ns.v }}{% endfor %}";
const CHATML =
  "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

let base: string;
beforeAll(() => {
  base = makeFixture(FAMILY_FIXTURES.llama!).dir;
});

/** A copy of the fixture checkpoint whose chat template is `template`: in
 * chat_template.jinja, or in tokenizer_config.json (as a string or a named list). */
function withTemplate(template: string, where: 'jinja' | 'config' | 'named' = 'config'): string {
  const dir = tempDir('template');
  fs.cpSync(base, dir, { recursive: true });
  if (where === 'jinja') fs.writeFileSync(path.join(dir, 'chat_template.jinja'), template);
  else {
    const file = path.join(dir, 'tokenizer_config.json');
    const cfg = JSON.parse(fs.readFileSync(file, 'utf8'));
    const value =
      where === 'named'
        ? [
            { name: 'tool_use', template: CHATML },
            { name: 'default', template },
          ]
        : template;
    fs.writeFileSync(file, JSON.stringify({ ...cfg, chat_template: value }));
  }
  return dir;
}

const chat = (model: string, content = 'Hi') => ({ model, messages: [{ role: 'user', content }], max_tokens: 1, temperature: 0 });

/** The pids of the server's chat template processes. */
function templateProcesses(serverPid: number): number[] {
  return fs
    .readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        const stat = fs.readFileSync(`/proc/${p}/stat`, 'utf8');
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        return ppid === serverPid && fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('chat-template');
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** Whether a process runs (a zombie, ended and not yet reaped, does not). */
const alive = (pid: number) => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
};

describe('hostile chat templates under `ctxprobe serve`', () => {
  let s: Served;
  let http: string;
  beforeAll(async () => {
    const repo = tempDir('template-repo');
    const models = {
      nested: withTemplate(NESTED, 'jinja'),
      huge: withTemplate(HUGE_RANGE),
      output: withTemplate(OUTPUT_5E9),
      gemma: withTemplate(fs.readFileSync(path.join(HERE, 'chat-templates/gemma-7b-it.jinja'), 'utf8'), 'jinja'),
    };
    for (const [name, dir] of Object.entries(models))
      fs.writeFileSync(path.join(repo, `${name}.json`), JSON.stringify({ name, path: dir }));
    s = await serveCli('', ['--models', repo]);
    http = `http://127.0.0.1:${s.httpPort}`;
  }, 120_000);
  afterAll(async () => {
    if (s && s.child.exitCode === null) await s.stop('SIGKILL');
  });

  it('a nested range loop: a 500 naming the template within its time bound, while /health and gRPC health answer', async () => {
    const health = healthClient(s.grpcPort);
    const started = Date.now();
    let pending = true;
    const answer = postJson(http, '/v1/chat/completions', chat('nested')).finally(() => (pending = false));
    let httpAnswers = 0;
    let grpcAnswers = 0;
    while (pending) {
      const [h, g] = await Promise.all([fetch(`${http}/health`), unary(health, 'Check', { service: '' })]);
      if (!pending) break;
      if (h.status === 200) httpAnswers++;
      if (g.status === 'SERVING') grpcAnswers++;
      await sleep(50);
    }
    const res = await answer;
    const took = Date.now() - started;
    expect(res.status).toBe(500);
    expect(res.body.error.message).toBe("messages: the model's chat template (chat_template.jinja) did not finish within 2 s");
    // Before: neither answered until the render ended, and it never did.
    expect(httpAnswers).toBeGreaterThanOrEqual(5);
    expect(grpcAnswers).toBeGreaterThanOrEqual(5);
    // The render's bound, its grace and a loaded machine's slack; before, 1e10 iterations.
    expect(took).toBeLessThan(TEMPLATE_BOUNDS.renderMs + 10_000);
    // gRPC: the same failure, FAILED_PRECONDITION, on a probe of a conversation.
    const err = await unary(client('Probing', s.grpcPort), 'Probe', {
      model: 'nested',
      samples: [{ messages: [{ role: 'user', content: 'Hi' }] }],
    }).catch((e) => e);
    expect(err.code).toBe(grpc.status.FAILED_PRECONDITION);
    expect(err.details).toBe("samples[0].messages: the model's chat template (chat_template.jinja) did not finish within 2 s");
    health.close();
  }, 60_000);

  it('range(1000000000): refused, and the server answers the next request (the template process is replaced)', async () => {
    const res = await postJson(http, '/v1/chat/completions', chat('huge'));
    expect(res.status).toBe(500);
    expect(res.body.error.message).toMatch(
      /^messages: the model's chat template \(tokenizer_config\.json chat_template\) (did not finish|ran out of memory)/,
    );
    const score = await postJson(http, '/v1/score', { model: 'huge', items: [{ contextText: 'Hello', continuationsText: [' world'] }] });
    expect(score.status).toBe(200);
    const again = await postJson(http, '/v1/chat/completions', chat('huge'));
    expect(again.status).toBe(500);
    expect((await fetch(`${http}/health`)).status).toBe(200);
  }, 60_000);

  it('a 5e9-character output: refused at the output bound, the server alive', async () => {
    const res = await postJson(http, '/v1/chat/completions', chat('output'));
    expect(res.status).toBe(500);
    expect(res.body.error.message).toMatch(
      /^messages: the model's chat template \(tokenizer_config\.json chat_template\) wrote more than \d+ characters \(the bound for these arguments\)$/,
    );
    expect((await fetch(`${http}/health`)).status).toBe(200);
  }, 60_000);

  it("a conversation the template refuses on purpose (raise_exception) is still the client's: 400 / INVALID_ARGUMENT with its message", async () => {
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
    ];
    const res = await postJson(http, '/v1/chat/completions', { ...chat('gemma'), messages });
    expect(res.status).toBe(400);
    expect(res.body.error.message).toBe('messages: the chat template cannot render these messages: System role not supported');
    const err = await unary(client('Probing', s.grpcPort), 'Probe', { model: 'gemma', samples: [{ messages }] }).catch((e) => e);
    expect(err.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err.details).toBe('samples[0].messages: the chat template cannot render these messages: System role not supported');
    // Without the system prompt it renders.
    expect((await postJson(http, '/v1/chat/completions', { ...chat('gemma'), messages: messages.slice(1) })).status).toBe(200);
  }, 60_000);

  it('SIGTERM during a hostile render drains: the render is answered, the server exits 0, its template processes with it', async () => {
    const answer = postJson(http, '/v1/chat/completions', chat('nested'));
    await sleep(300); // the render is under way
    // One per model that has one now (a process ended at a bound is replaced at the next render).
    const processes = templateProcesses(s.serverPid);
    expect(processes.length).toBeGreaterThanOrEqual(1);
    const code = await s.stop();
    expect(code).toBe(0);
    expect(s.lines.find((l) => l.event === 'stopped')!.how).toBe('drained');
    expect((await answer).status).toBe(500);
    for (const pid of processes) expect(alive(pid), `template process ${pid}`).toBe(false);
  }, 60_000);
});

describe('a template that does not parse refuses the model at load', () => {
  it('names chat_template.jinja (ctxprobe serve exits, saying so)', async () => {
    const dir = withTemplate('{% for m in messages %}{{ m.content }}', 'jinja');
    const failed = await serveCli(dir).then(
      (served) => {
        void served.stop('SIGKILL');
        return undefined;
      },
      (e: Error) => e,
    );
    expect(failed?.message).toContain(`${path.join(dir, 'chat_template.jinja')}: the chat template does not parse:`);
  }, 60_000);

  it("names tokenizer_config.json and the template's name in a named list", async () => {
    const dir = withTemplate('{% if %}', 'named');
    await expect(loadModel({ name: 'broken', path: dir, threads: 1 })).rejects.toThrow(
      `${path.join(dir, 'tokenizer_config.json')} (chat_template "default"): the chat template does not parse:`,
    );
  }, 60_000);
});

describe('a large template', () => {
  let served: Awaited<ReturnType<typeof serveModel>>;
  beforeAll(async () => {
    // A valid 5 MiB template: ChatML behind a 5 MiB comment. Parsing it takes ~0.4 s here.
    served = await serveModel('big', withTemplate(`{# ${'x'.repeat(5 * 2 ** 20)} #}${CHATML}`));
  }, 120_000);
  afterAll(async () => {
    await served?.server.close();
  });

  it('is compiled once, at load, not for each request', async () => {
    const tok = served.model.engine.tokenizer;
    expect(tok.chatTemplateCompilations).toBe(1);
    for (let i = 0; i < 3; i++) {
      const res = await postJson(served.base, '/v1/chat/completions', chat('big', `Hi ${i}`));
      expect(res.status).toBe(200);
    }
    const probe = await postJson(served.base, '/v1/probe', { model: 'big', samples: [{ messages: [{ role: 'user', content: 'Hi' }] }] });
    expect(probe.status).toBe(200);
    expect(probe.body.samples[0].spans.map((sp: any) => sp.label)).toEqual(['user#1']);
    expect(tok.chatTemplateCompilations).toBe(1);
  }, 60_000);
});

describe('the template process', () => {
  it('ends at its memory bound alone, and the next render compiles the template in a new one', async () => {
    // A small heap and a long time bound, so that memory ends it first.
    const p = new ChatTemplateProcess(`{% if messages[0].content == 'grow' %}{% set x = range(1000000000) %}{% endif %}ok`, {
      ...TEMPLATE_BOUNDS,
      heapMb: 64,
      renderMs: 60_000,
    });
    expect(await p.start()).toBeUndefined();
    const failed = await p.render({ messages: [{ role: 'user', content: 'grow' }] });
    expect(failed).toEqual({ failure: { kind: 'memory', message: "ran out of memory (its process's 64 MiB)" } });
    expect(await p.render({ messages: [{ role: 'user', content: 'fine' }] })).toEqual({ text: 'ok' });
    expect(p.compilations).toBe(2);
    await p.close();
  }, 60_000);
});

describe('the renderer tells failures apart', () => {
  const render = (template: string, args: Record<string, unknown> = {}) =>
    renderTemplate(
      compileTemplate(template),
      { messages: [{ role: 'user', content: 'Hi' }], ...args },
      { timeMs: 10_000, outputChars: 1000 },
    );
  const kind = (template: string, args?: Record<string, unknown>) => {
    const r = render(template, args);
    return 'failure' in r ? r.failure.kind : 'rendered';
  };

  it("the template's own raise_exception, however it is reached, is the client's conversation refused", () => {
    expect(render("{{ raise_exception('Conversation roles must alternate') }}")).toEqual({
      failure: { kind: 'rejected', message: 'Conversation roles must alternate' },
    });
    expect(kind("{% set fail = raise_exception %}{{ fail('aliased') }}")).toBe('rejected');
    expect(
      kind("{% macro check(m) %}{% if m.role != 'system' %}{{ raise_exception('no') }}{% endif %}{% endmacro %}{{ check(messages[0]) }}"),
    ).toBe('rejected');
  });

  it('anything else is the template failing: an argument of raise_exception that fails, another function, an unknown filter', () => {
    expect(kind('{{ raise_exception(nothing.here()) }}')).toBe('error');
    expect(kind("{% macro raise(m) %}{{ m.x.y() }}{% endmacro %}{{ raise('z') }}")).toBe('error');
    expect(kind('{{ messages | no_such_filter }}')).toBe('error');
  });

  it("template arguments that clash with the template's globals are the client's", () => {
    expect(kind('{{ messages[0].content }}', { range: 1 })).toBe('arguments');
  });

  it('output is counted as loops write it, and any string the template builds is held to the bound', () => {
    const out = render('{% for i in range(100000) %}x{% endfor %}');
    expect(out).toEqual({ failure: { kind: 'output', message: 'wrote more than 1000 characters (the bound for these arguments)' } });
    expect(kind("{% set ns = namespace(v='x') %}{% for i in range(40) %}{% set ns.v = ns.v ~ ns.v %}{% endfor %}")).toBe('output');
    expect(render('{% for m in messages %}{{ m.content }}{% endfor %}')).toEqual({ text: 'Hi' });
  });
});

describe('every render goes through the contained renderer', () => {
  const sources = (dir: string): string[] =>
    fs
      .readdirSync(path.join(ROOT, dir), { withFileTypes: true })
      .flatMap((e) => (e.isDirectory() ? sources(path.join(dir, e.name)) : e.name.endsWith('.ts') ? [path.join(dir, e.name)] : []));
  const code = sources('src').map((f) => ({ f, text: fs.readFileSync(path.join(ROOT, f), 'utf8') }));

  it('@huggingface/jinja is imported by src/text/chat-template.ts alone', () => {
    expect(code.filter((c) => c.text.includes("from '@huggingface/jinja'")).map((c) => c.f)).toEqual(['src/text/chat-template.ts']);
  });

  it('no source file calls the in-thread renderers (renderChat, renderChatText) but their own', () => {
    const callers = code.filter((c) => c.f !== 'src/requests/segments.ts' && /\brenderChat(Text)?\(/.test(c.text)).map((c) => c.f);
    expect(callers).toEqual([]);
  });
});
