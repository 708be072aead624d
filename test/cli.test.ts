// The default model and the command line, as a person on a fresh machine meets them.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ensureCheckpoint, loadModel, readRepository } from '../src/serving/repository.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { serveCli, type Served } from './cli-serve.js';
import { directScoring } from '../src/requests/scoring.js';
import { anchors, readDoc, section } from './markdown.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** The CLI as a user runs it (bin/ctxprobe.js), its standard output. */
const ctxprobeCli = (args: string[]) => execFileSync(process.execPath, [path.join(root, 'bin/ctxprobe.js'), ...args], { encoding: 'utf8' });
/** `ctxprobe <command> --model <dir> --threads 1 --chunk <label=text>… <rest…>`, its JSON. */
const chunkCommand = (command: string, dir: string, chunks: string[], rest: string[]) =>
  JSON.parse(ctxprobeCli([command, '--model', dir, '--threads', '1', '--chunk', ...chunks, ...rest]));
/** `label=text` arguments as the library's chunks. */
const asChunks = (args: string[]) => args.map((c) => ({ label: c.slice(0, c.indexOf('=')), text: c.slice(c.indexOf('=') + 1) }));

describe('the default model', () => {
  it('is a Llama checkpoint generated deterministically from its repository config', async () => {
    const [entry] = readRepository();
    expect(entry!.name).toBe('tiny-llama');
    expect(entry!.synthetic?.family).toBe('llama');
    const a = { ...entry!, path: path.join(tempDir('default-a'), 'm') };
    const b = { ...entry!, path: path.join(tempDir('default-b'), 'm') };
    ensureCheckpoint(a);
    ensureCheckpoint(b);
    for (const f of ['config.json', 'tokenizer.json', 'model.safetensors']) {
      expect(fs.readFileSync(path.join(a.path, f)).equals(fs.readFileSync(path.join(b.path, f)))).toBe(true);
    }
    const m = await loadModel({ ...a, threads: 1 });
    expect(m.engine.info.family).toBe('llama');
    // Its spec says the size it makes: the tokenizer's tokens and the embedding's rows (the
    // corpus gives 124 merges at most, so a larger vocab made a smaller model than it said).
    const tokens = Object.keys(JSON.parse(fs.readFileSync(path.join(a.path, 'tokenizer.json'), 'utf8')).model.vocab).length;
    expect([tokens, m.engine.info.vocab]).toEqual([entry!.synthetic!.vocab, entry!.synthetic!.vocab]);
    expect(m.engine.tokenizer.decode(m.engine.tokenizer.encode('Knowledge: the tower is tall.'))).toBe('Knowledge: the tower is tall.');
    await m.engine.release();
  });
});

describe('the default model chats', () => {
  it('has a ChatML template whose turn markers are single special tokens, and an older generated copy is made again', async () => {
    const [entry] = readRepository();
    expect(entry!.synthetic?.chatTemplate).toBe('chatml');
    const dir = path.join(tempDir('default-chat'), 'm');
    // What an older release generated: the same spec without a chat template.
    const { chatTemplate: _chat, ...older } = entry!.synthetic!;
    ensureCheckpoint({ ...entry!, path: dir, synthetic: older });
    expect(JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8')).chat_template).toBeUndefined();
    ensureCheckpoint({ ...entry!, path: dir });
    const m = await loadModel({ ...entry!, path: dir, threads: 1 });
    const tok = m.engine.tokenizer;
    expect(tok.chatTemplate).toMatch(/<\|im_start\|>/);
    const ids = tok.encode('<|im_start|>user\nHi<|im_end|>\n');
    expect(tok.tokenString(ids[0]!)).toBe('<|im_start|>');
    expect(ids.filter((id) => tok.tokenString(id) === '<|im_end|>')).toEqual([tok.eosId]);
    await m.engine.release();
  });
});

describe('ctxprobe generate', () => {
  it('prints the greedy chain of Score as JSON, streams the same text, and refuses bad options naming them', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.qwen2!);
    const cli = (...args: string[]) =>
      spawnSync(process.execPath, [path.join(root, 'bin/ctxprobe.js'), 'generate', '--model', fx.dir, '--threads', '1', ...args], {
        encoding: 'utf8',
      });
    const out = cli(
      '--chunk',
      'knowledge=The tower is tall.',
      'user= How tall is it?',
      '--max-tokens',
      '6',
      '--logprobs',
      '1',
      '--attention',
    );
    expect(out.status, out.stderr).toBe(0);
    const printed = JSON.parse(out.stdout);
    const [choice] = printed.choices;
    expect(printed.attentionLabels).toEqual(['knowledge', 'user', 'response']);
    expect(choice.attention).toHaveLength(choice.tokens.length);
    // Each token is the argmax after the prompt and the tokens before it; its log-prob is Score's.
    const m = await loadModel({ name: 'x', path: fx.dir, threads: 1 });
    const tok = m.engine.tokenizer;
    // The chunks are tokenised as one text (their boundary tokens go to the later chunk).
    const prompt = tok.encode('The tower is tall. How tall is it?', true); // with BOS unless --no-special-tokens
    expect(printed.prompt.ids).toEqual(prompt);
    for (const [k, token] of choice.tokens.entries()) {
      const [[s]] = (await directScoring(m.scorer).loglikelihood([
        { context: [...prompt, ...choice.tokens.slice(0, k)], continuations: [[token]], topK: 1 },
      ])) as any;
      expect(s.tokenLogprobs[0]).toBe(choice.logprobs[k]);
      expect(s.topK[0].ids[0]).toBe(token);
    }
    await m.engine.release();
    const streamed = cli('--chunk', 'knowledge=The tower is tall.', 'user= How tall is it?', '--max-tokens', '6', '--stream');
    expect(streamed.stdout).toBe(`${choice.text}\n`);
    const bad = cli('--prompt', 'x', '--top-p', '1.5');
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/top_p: must be in \(0, 1\]/);
    expect(cli('--prompt', 'x', '--chunk', 'a=b').stderr).toMatch(/give one of --prompt/);
  });

  it('takes its sampling, stop, choice, special-token, exclusion and chat flags as a user types them', async () => {
    const fx = makeFixture({ ...FAMILY_FIXTURES.qwen2!, chatTemplate: 'chatml' });
    const run = (...args: string[]) => {
      const out = spawnSync(
        process.execPath,
        [path.join(root, 'bin/ctxprobe.js'), 'generate', '--model', fx.dir, '--threads', '1', ...args],
        { encoding: 'utf8' },
      );
      expect(out.status, out.stderr).toBe(0);
      return JSON.parse(out.stdout);
    };
    const sampled = [
      '--prompt',
      'Once upon a time',
      '--max-tokens',
      '10',
      '--temperature',
      '1.2',
      '--top-k',
      '50',
      '--min-p',
      '0.01',
      '--seed',
      '7',
      '-n',
      '2',
    ];
    const a = run(...sampled);
    expect(a.choices).toHaveLength(2);
    expect(run(...sampled).choices.map((c: any) => c.tokens)).toEqual(a.choices.map((c: any) => c.tokens));
    // A stop string taken from the greedy text ends it there.
    const greedy = run('--prompt', 'Once upon a time', '--max-tokens', '12').choices[0];
    const at = Array.from({ length: greedy.text.length }, (_, i) => i).findIndex(
      (i) => i > 0 && greedy.text.indexOf(greedy.text.slice(i, i + 2)) === i && greedy.text.slice(i, i + 2).length === 2,
    );
    expect(at).toBeGreaterThan(0);
    const cut = greedy.text.slice(at, at + 2);
    const stopped = run('--prompt', 'Once upon a time', '--max-tokens', '12', '--stop', cut).choices[0];
    expect([stopped.text, stopped.finish]).toEqual([greedy.text.slice(0, at), 'stop']);
    // Without special tokens the prompt has no BOS; position 0 left out of the keys is reported apart.
    const m = await loadModel({ name: 'x', path: fx.dir, threads: 1 });
    const tok = m.engine.tokenizer;
    expect(run('--prompt', 'Hi', '--no-special-tokens', '--max-tokens', '1').prompt.ids).toEqual(tok.encode('Hi', false));
    const excluded = run('--chunk', 'a=Knowledge here.', 'b= Question?', '--attention', '--exclude', '0', '--max-tokens', '2').choices[0]
      .attention[0];
    expect(excluded.massExcluded.every((v: number) => v > 0)).toBe(true);
    // Chat messages from a file, the assistant's turn opened by the template.
    const messages = path.join(tempDir('cli-chat'), 'm.json');
    fs.writeFileSync(messages, JSON.stringify([{ role: 'user', content: 'Hi' }]));
    const chat = run('--messages', messages, '--max-tokens', '3');
    expect(chat.prompt.ids).toEqual(tok.encode('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n', false));
    await m.engine.release();
  });
});

describe('ctxprobe score', () => {
  it('prints the library answer as JSON', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.qwen2!);
    const out = ctxprobeCli([
      'score',
      '--model',
      fx.dir,
      '--threads',
      '1',
      '--context',
      'User: Hi',
      '--continuation',
      ' Bot: hello',
      ' Bot: bye',
    ]);
    const printed = JSON.parse(out);
    const m = await loadModel({ name: 'x', path: fx.dir, threads: 1 });
    const [direct] = await directScoring(m.scorer).loglikelihood([{ context: 'User: Hi', continuations: [' Bot: hello', ' Bot: bye'] }]);
    expect(printed.results.map((r: any) => r.continuation)).toEqual([' Bot: hello', ' Bot: bye']);
    printed.results.forEach((r: any, i: number) => {
      expect(r.tokenIds).toEqual(direct![i]!.tokenIds);
      expect(Math.abs(r.logprob - direct![i]!.logprob)).toBeLessThan(1e-6);
    });
    const rolling = JSON.parse(
      execFileSync(
        process.execPath,
        [path.join(root, 'bin/ctxprobe.js'), 'score', '--model', fx.dir, '--rolling', 'Once upon a time', '--min-k', '50'],
        { encoding: 'utf8' },
      ),
    );
    const [r] = await directScoring(m.scorer).rolling([{ text: 'Once upon a time', minKPercent: 50 }]);
    expect(Math.abs(rolling.rolling[0].meanLoss - r!.meanLoss)).toBeLessThan(1e-9);
    await m.engine.release();
  });

  it('fails with a clear message for a folder that is not a checkpoint', () => {
    const empty = tempDir('empty');
    let stderr = '';
    try {
      execFileSync(process.execPath, [path.join(root, 'bin/ctxprobe.js'), 'score', '--model', empty, '--continuation', 'x'], {
        encoding: 'utf8',
        stdio: 'pipe',
      });
    } catch (e) {
      stderr = (e as { stderr: string }).stderr;
    }
    expect(stderr).toContain(`${empty} has no config.json`);
  });
});

describe('glibc malloc setting', () => {
  it('npm start sets MALLOC_MMAP_THRESHOLD_; serve warns when it is not set, and not when it is', async () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
    expect(pkg.scripts.start).toMatch(/^MALLOC_MMAP_THRESHOLD_=\$\{MALLOC_MMAP_THRESHOLD_:-1048576\} exec node bin\/ctxprobe\.js serve$/);
    const dir = makeFixture(FAMILY_FIXTURES.llama!).dir;
    const without = await serveCli(dir, [], { MALLOC_MMAP_THRESHOLD_: '' });
    const withIt = await serveCli(dir, [], { MALLOC_MMAP_THRESHOLD_: '1048576' });
    try {
      const warned = (s: Served) =>
        s.lines.some((l) => l.event === 'malloc' && l.level === 'warn' && /MALLOC_MMAP_THRESHOLD_=1048576/.test(l.message));
      expect(warned(without)).toBe(process.platform === 'linux' && Boolean((process.report.getReport() as any).header.glibcVersionRuntime));
      expect(warned(withIt)).toBe(false);
    } finally {
      await Promise.all([without.stop(), withIt.stop()]);
    }
  });
});

describe('ctxprobe serve', () => {
  it('binds, serves, and on SIGTERM finishes the call in flight before exiting 0', async () => {
    const { spawn } = await import('node:child_process');
    const { scoringClient, unary } = await import('./helpers.js');
    const fx = makeFixture(FAMILY_FIXTURES.llama!);
    const child = spawn(
      process.execPath,
      [
        path.join(root, 'bin/ctxprobe.js'),
        'serve',
        '--model',
        fx.dir,
        '--port',
        '0',
        '--metrics-port',
        '0',
        '--http-port',
        '0',
        '--threads',
        '1',
        '--max-queue-delay-ms',
        '300',
      ],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    const lines: any[] = [];
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    const serving = new Promise<any>((resolve) => {
      let buf = '';
      child.stderr!.on('data', (d) => {
        buf += d;
        for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
          const line = JSON.parse(buf.slice(0, nl));
          buf = buf.slice(nl + 1);
          lines.push(line);
          if (line.event === 'serving') resolve(line);
        }
      });
    });
    const { address } = await serving;
    const client = scoringClient(Number(address.split(':').pop()));
    // Connected first: a connection still being made when SIGTERM comes is refused (under
    // load one took longer than the 50 ms below), and the call must be in flight.
    await new Promise<void>((resolve, reject) => client.waitForReady(Date.now() + 20_000, (e?: Error) => (e ? reject(e) : resolve())));
    const pending = unary(client, 'Score', { items: [{ id: 'q', contextText: 'Hello', continuationsText: [' world'] }] });
    await new Promise((r) => setTimeout(r, 50));
    child.kill('SIGTERM');
    const answer = await pending;
    expect(answer.items[0].continuations[0].numTokens).toBeGreaterThan(0);
    expect(await exited).toBe(0);
    expect(lines.map((l) => l.event)).toEqual(expect.arrayContaining(['listening', 'model_loaded', 'serving', 'draining', 'stopped']));
    // The load log says which dtype computes and why.
    const loaded = lines.find((l) => l.event === 'model_loaded')!;
    expect([loaded.dtype, loaded.dtypeReason]).toEqual(['float32', 'CPU default']);
    client.close();
  });
});

describe('ctxprobe probe', () => {
  it('prints the prober answer and writes the HTML report and SVG figures', async () => {
    const { Prober } = await import('../src/requests/probe.js');
    const fx = makeFixture(FAMILY_FIXTURES.mistral!);
    const out = tempDir('probe-cli');
    const chunks = [
      'instruction=Instruction: answer.',
      'history= User: Who built it?',
      'knowledge= Knowledge: Eiffel.',
      'response= Bot: Eiffel did.',
    ];
    const printed = chunkCommand('probe', fx.dir, chunks, ['--exclude', '0', '--html', path.join(out, 'r.html'), '--svg', path.join(out, 'fig')]);
    const m = await loadModel({ name: 'x', path: fx.dir, threads: 1 });
    const direct = await new Prober(m.engine).probe([
      { chunks: asChunks(chunks), excludePositions: [0] },
    ]);
    expect(printed.samples[0].labels).toEqual(['instruction', 'history', 'knowledge', 'response']);
    printed.samples[0].votes.forEach((row: number[], l: number) =>
      row.forEach((v, c) => expect(Math.abs(v - direct.samples[0]!.votes[l]![c]!)).toBeLessThan(1e-6)),
    );
    expect(fs.readFileSync(path.join(out, 'r.html'), 'utf8')).toMatch(/<svg[^>]*class="figure layer-bars"/);
    for (const f of ['fig-votes.svg', 'fig-mass.svg', 'fig-heatmap-0.svg']) expect(fs.existsSync(path.join(out, f))).toBe(true);
    await m.engine.release();
  });
});

describe('ctxprobe attribute', () => {
  it("prints each chunk's Δ as the library computes it, the sweep as asked, and writes the SVG bars", async () => {
    const { prepareAttribution } = await import('../src/requests/attribution.js');
    const fx = makeFixture(FAMILY_FIXTURES.llama!);
    const out = tempDir('attribute-cli');
    // The example of docs/attribution.md.
    const chunks = [
      'instruction=Answer from the knowledge. ',
      'history=User: Who built it? ',
      'knowledge=Knowledge: Eiffel built the tower. ',
      'response=Bot: Eiffel.',
    ];
    const printed = chunkCommand('attribute', fx.dir, chunks, ['--sweep', '0,1,all', '--svg', path.join(out, 'attr')]);
    const m = await loadModel({ name: 'x', path: fx.dir, threads: 1 });
    const prepared = await prepareAttribution(
      m.engine,
      [{ chunks: asChunks(chunks) }],
      { historySweep: [0, 1, 2 ** 31 - 1] },
    );
    const [want] = prepared.finish((await m.scorer.scoreUnits(prepared.units)).scores);
    const got = printed.samples[0];
    expect(got.chunks.map((c: any) => c.label)).toEqual(['instruction', 'history', 'knowledge']);
    got.chunks.forEach((c: any, k: number) => {
      expect(Math.abs(c.remove.delta - want!.chunks[k]!.remove!.delta)).toBeLessThan(1e-5);
      expect(Math.abs(c.mask.delta - want!.chunks[k]!.mask!.delta)).toBeLessThan(1e-5);
    });
    expect(got.sweep.map((p: any) => [p.keep, p.dropped])).toEqual([
      [0, [1]],
      [1, []],
      [2 ** 31 - 1, []],
    ]);
    expect(printed.variants).toBe(prepared.units.length);
    expect(fs.readFileSync(path.join(out, 'attr-0.svg'), 'utf8')).toMatch(/<svg[^>]*class="figure effect-bars"/);
    await m.engine.release();
  });
});

describe('the settings table (docs/operations.md) and serve --help', () => {
  const serveHelp = () => execFileSync(process.execPath, [path.join(root, 'bin/ctxprobe.js'), 'serve', '--help'], { encoding: 'utf8' });

  it('lists every flag `ctxprobe serve` declares and no other, each with the environment variable it names', () => {
    const table = section(readDoc('docs/operations.md'), 'Settings');
    const rows = table.split('\n').filter((l) => l.startsWith('| `--'));
    expect(rows.length).toBeGreaterThan(20);
    const raw = serveHelp();
    const help = raw.replace(/\s+/g, ' ');
    const cli = fs.readFileSync(path.join(root, 'src/cli/serve.ts'), 'utf8');
    const documented = new Set<string>();
    for (const row of rows) {
      const [flags, envs] = row.split('|').slice(1, 3) as [string, string];
      for (const [, flag] of flags.matchAll(/`(--[a-z-]+)/g)) {
        expect(help, row).toMatch(new RegExp(` ${flag}[ ,]`));
        documented.add(flag!);
      }
      for (const [, env] of envs.matchAll(/`(CTXPROBE_[A-Z_]+)`/g)) {
        // Declared on a flag (help says `env: X`), or read directly (a secret value with no flag).
        expect(help.includes(`env: ${env})`) || cli.includes(`process.env.${env}`), `${env} in: ${row}`).toBe(true);
      }
    }
    // The other way: a flag of serve that the table does not give is a setting users cannot find.
    const declared = [...raw.matchAll(/^ {2}(--[a-z-]+)/gm)].map((m) => m[1]!);
    expect(declared.length).toBeGreaterThan(20);
    expect(declared.filter((flag) => !documented.has(flag))).toEqual([]);
  });

  it('states the memory rule in one line and points to the page that has the table', () => {
    const line = serveHelp()
      .split('\n')
      .find((l) => l.startsWith('Memory: '));
    expect(line, 'a line of serve --help starting "Memory: "').toBeDefined();
    expect(line).toMatch(/weights at rest/);
    expect(line).toMatch(/refused at load/);
    const [, page, anchor] = /(docs\/[a-z-]+\.md)#([a-z0-9-]+)/.exec(line!)!;
    expect(anchors(readDoc(page!)).has(anchor!), `${page}#${anchor}`).toBe(true);
    // The figures it gives are the table's: 8B in F32 32.4 GiB, BF16 kept as stored 19.4.
    expect(section(readDoc(page!), 'Memory')).toMatch(/\| 8B \(Llama-3-8B\) \| 29\.9 \+ 2\.5 = 32\.4 \| .* \| 15\.0 \+ 4\.5 = 19\.4 \|/);
  });
});

describe('the model repository', () => {
  it('refuses unknown keys and wrong types in a model file, naming the file and the key', () => {
    const dir = tempDir('repo');
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ path: 'x', maxBatchToken: 512 }, /m\.json: maxBatchToken is not a setting ctxprobe knows/],
      [{ path: 'x', threads: '2' }, /m\.json: threads must be integer/],
      [{ path: 'x', dtype: 'fp16' }, /m\.json: dtype must be equal to one of the allowed values/],
      [{ name: 'm' }, /m\.json: path is required/],
      [{ path: 'x', synthetic: { family: 'llama', hidden: 8 } }, /m\.json: synthetic\.layers is required/],
    ];
    for (const [entry, message] of cases) {
      fs.writeFileSync(path.join(dir, 'm.json'), JSON.stringify(entry));
      expect(() => readRepository(dir)).toThrow(message);
    }
    fs.writeFileSync(path.join(dir, 'm.json'), '{"path": ');
    expect(() => readRepository(dir)).toThrow(/m\.json: not valid JSON/);
  });

  it('generates the default model atomically: a process killed at any point leaves no half checkpoint', async () => {
    const dir = tempDir('atomic');
    const entry = {
      name: 'd',
      path: path.join(dir, 'default'),
      synthetic: { ...FAMILY_FIXTURES.llama!, hidden: 256, intermediate: 1024, layers: 6, vocab: 600 },
    };
    const script = `import('${pathToFileURL(path.join(root, 'dist/src/serving/repository.js')).href}').then((m) => m.ensureCheckpoint(${JSON.stringify(entry)}))`;
    for (const killAfterMs of [60, 150, 250, 350]) {
      const child = spawn(process.execPath, ['-e', script], { stdio: 'ignore' });
      const exited = new Promise((r) => child.on('exit', r));
      await new Promise((r) => setTimeout(r, killAfterMs));
      child.kill('SIGKILL');
      await exited;
      // Either nothing is there yet, or a whole checkpoint is.
      if (fs.existsSync(entry.path)) {
        expect(fs.readdirSync(entry.path).sort()).toEqual(['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']);
        fs.rmSync(entry.path, { recursive: true });
      }
    }
    // An interrupted writer of an older version left a folder without config.json: replaced.
    fs.mkdirSync(entry.path, { recursive: true });
    fs.writeFileSync(path.join(entry.path, 'model.safetensors'), 'partial');
    ensureCheckpoint(entry);
    const m = await loadModel({ ...entry, threads: 1 });
    expect(m.engine.info.layers).toBe(6);
    await m.engine.release();
  }, 60_000);
});

describe('long texts on the command line', () => {
  it('come from files (@FILE), standard input (-) or the arguments themselves, with the same answer', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.llama!);
    const dir = tempDir('long-args');
    const context = 'Once upon a time, the knight answered the refutation of round three. '.repeat(300); // 20,700 characters
    fs.writeFileSync(path.join(dir, 'context.txt'), context);
    fs.writeFileSync(path.join(dir, 'cont.txt'), ' And so it ended.');
    const cli = (args: string[], input?: string) =>
      spawnSync(process.execPath, [path.join(root, 'bin/ctxprobe.js'), 'score', '--model', fx.dir, '--threads', '1', ...args], {
        encoding: 'utf8',
        input,
      });
    const fromFiles = cli(['--context', `@${path.join(dir, 'context.txt')}`, '--continuation', `@${path.join(dir, 'cont.txt')}`]);
    expect(fromFiles.status, fromFiles.stderr).toBe(0);
    const fromStdin = cli(['--context', '-', '--continuation', ' And so it ended.'], context);
    expect(fromStdin.status, fromStdin.stderr).toBe(0);
    // onnxruntime's telemetry used to match the whole command line with a recursive regex
    // and overflow the session thread's stack here (SIGSEGV, nothing printed).
    const inline = cli(['--context', context, '--continuation', ' And so it ended.']);
    expect(inline.signal).toBeNull();
    expect(inline.status, inline.stderr).toBe(0);
    const m = await loadModel({ name: 'x', path: fx.dir, threads: 1 });
    const [direct] = await directScoring(m.scorer).loglikelihood([{ context, continuations: [' And so it ended.'] }]);
    await m.engine.release();
    for (const out of [fromFiles, fromStdin, inline])
      expect(Math.abs(JSON.parse(out.stdout).results[0].logprob - direct![0]!.logprob)).toBeLessThan(1e-5);
  }, 60_000);

  it('a probe of six 2,760-character chunks given inline answers as from files, and no telemetry file is written', () => {
    // The field report: every argument under the old 8,192-character guard, 16.5k in all.
    const fx = makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 16384 });
    const dir = tempDir('long-probe');
    // ~700 tokens a chunk ("the " is one token of the fixture's BPE) keep the probe short.
    const round = (r: number) => `User: round ${r}: ${'the '.repeat(690)}`.slice(0, 2760);
    const inline: string[] = [];
    const files: string[] = [];
    for (let r = 1; r <= 6; r++) {
      fs.writeFileSync(path.join(dir, `r${r}.txt`), round(r));
      inline.push('--chunk', `r${r}=${round(r)}`);
      files.push('--chunk', `r${r}=@${path.join(dir, `r${r}.txt`)}`);
    }
    const probe = (chunks: string[]) =>
      spawnSync(
        process.execPath,
        [path.join(root, 'bin/ctxprobe.js'), 'probe', '--model', fx.dir, '--threads', '1', '--query', 'r6', ...chunks],
        {
          encoding: 'utf8',
        },
      );
    const a = probe(inline);
    expect(a.signal, a.stderr).toBeNull();
    expect(a.status, a.stderr).toBe(0);
    const b = probe(files);
    expect(b.status, b.stderr).toBe(0);
    expect(JSON.parse(a.stdout)).toEqual(JSON.parse(b.stdout));
    for (const dir of new Set(['/tmp', os.tmpdir()])) expect(fs.existsSync(path.join(dir, `mat-debug-${a.pid}.log`))).toBe(false);
  }, 120_000);
});

describe('npx ctxprobe in a checkout', () => {
  /** A checkout as `npm ci` leaves it: the sources, then dist/ built after them. */
  function checkout(): string {
    const dir = tempDir('checkout');
    const parts = ['src', 'kernels', 'bench', 'scripts', 'bin', 'proto', 'test/row-bits.ts', 'package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.build.json'];
    for (const p of parts) fs.cpSync(path.join(root, p), path.join(dir, p), { recursive: true });
    fs.cpSync(path.join(root, 'dist'), path.join(dir, 'dist'), { recursive: true });
    fs.symlinkSync(path.join(root, 'node_modules'), path.join(dir, 'node_modules'));
    return dir;
  }
  const stampOf = (dir: string) => fs.statSync(path.join(dir, 'dist/openapi.json')).mtimeMs;

  it('runs the bin without rebuilding dist/ (npm exec installs the checkout into its cache and runs its prepare step)', () => {
    const dir = checkout();
    const built = stampOf(dir);
    // A cache of its own: npm's first install of this checkout, as in a fresh clone.
    const env = { ...process.env, npm_config_cache: tempDir('npm-cache'), npm_config_update_notifier: 'false' };
    const run = spawnSync('npx', ['ctxprobe', '--help'], { cwd: dir, env, encoding: 'utf8', timeout: 150_000 });
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^Usage: ctxprobe/m);
    // It ran the whole tsc build there, unseen: ~47 s before a word on a fresh clone.
    expect(stampOf(dir)).toBe(built);
  }, 180_000);

  it('prepare builds when a source is newer than dist/, saying so first, and not again after', () => {
    const dir = checkout();
    // The build itself is npm run build's business (tested everywhere dist/ is used): here a stand-in.
    const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
    pkg.scripts.build = `node -e "require('fs').writeFileSync('dist/openapi.json', '{}'); console.error('built')"`;
    fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify(pkg));
    const past = new Date(Date.now() - 60_000);
    fs.utimesSync(path.join(dir, 'dist/openapi.json'), past, past);
    const prepare = () => spawnSync(process.execPath, ['scripts/prepare.mjs'], { cwd: dir, encoding: 'utf8' });
    const first = prepare();
    expect(first.status, first.stderr).toBe(0);
    // The line comes before the build's own output (npm may warn in between).
    expect(first.stderr).toMatch(/^ctxprobe: building dist\/ \(npm run build: tsc, about half a minute\): sources changed since the last build\n[^]*^built$/m);
    const second = prepare();
    expect(second.stderr).toBe('ctxprobe: dist/ is newer than its sources, not rebuilt (npm run build rebuilds it)\n');
  });
});
