// The Python client over HTTP/JSON (examples/python/ctxprobe_http.py: the standard
// library only) against a running server: its numbers are the server's own (the probe
// run in-process, the gRPC Generate stream), refusals raise CtxprobeError with the code
// and the field, TLS and the bearer token work, and the notebook example of docs/probes.md runs
// as printed (with Debian's python3-matplotlib; skipped, saying so, without it).
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type LoadedModel } from '../src/serving/repository.js';
import { CtxprobeServer } from '../src/server.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { makeCertificates } from './certs.js';
import { directScoring } from '../src/requests/scoring.js';
import { client, streamed } from './helpers.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const python = process.env.CTXPROBE_PYTHON ?? '/usr/bin/python3';
const script = path.join(root, 'examples/python/ctxprobe_http.py');
const run = (args: string[], env: Record<string, string> = {}, cwd = root) =>
  promisify(execFile)(python, args, { encoding: 'utf8', cwd, env: { ...process.env, ...env } });
const hasPython = fs.existsSync(python);
const hasMatplotlib = (() => {
  try {
    execFileSync(python, ['-c', 'import matplotlib'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
if (!hasMatplotlib) console.warn(`skipping the notebook example of docs/probes.md: ${python} lacks matplotlib (apt-get install python3-matplotlib)`);

/** Python run with the client importable, printing one JSON value. */
async function library(code: string, env: Record<string, string> = {}): Promise<any> {
  const { stdout } = await run(['-c', `import sys, json\nsys.path.insert(0, ${JSON.stringify(path.dirname(script))})\nfrom ctxprobe_http import *\n${code}`], env);
  return JSON.parse(stdout);
}

describe.skipIf(!hasPython)('Python client over HTTP/JSON', () => {
  let model: LoadedModel;
  let server: CtxprobeServer;
  let url: string;
  beforeAll(async () => {
    model = await loadModel({ name: 'qwen', path: makeFixture({ ...FAMILY_FIXTURES.qwen2!, maxPositions: 256, chatTemplate: 'chatml' }).dir, threads: 1 });
    server = await CtxprobeServer.start({ port: 0, httpPort: 0, metricsPort: -1 });
    server.addModel(model);
    server.setServing();
    url = `http://127.0.0.1:${server.httpPort}`;
  });
  afterAll(async () => server?.close());

  it('probes from the command line: the votes, mass and heatmap of the probe run in-process', async () => {
    const { stdout } = await run([script, '--url', url, '--probe', 'knowledge=The tower was built in 1889.', 'response= Built in 1889.']);
    const out = JSON.parse(stdout);
    const [direct] = (await model.prober.probe([{ chunks: [{ label: 'knowledge', text: 'The tower was built in 1889.' }, { label: 'response', text: ' Built in 1889.' }] }])).samples;
    expect(out.labels).toEqual(['knowledge', 'response']);
    const close = (a: number[][], b: number[][]) => a.forEach((row, i) => row.forEach((v, j) => expect(Math.abs(v - b[i]![j]!)).toBeLessThan(1e-6)));
    close(out.votes, direct!.votes);
    close(out.mass, direct!.mass);
    close(out.heatmap, direct!.heatmap);
  });

  it('generates what gRPC Generate streams, decodes raw attention, and scores', async () => {
    const prompt = { messages: [{ role: 'user', content: 'Say something.' }], addGenerationPrompt: true };
    const out = await library(`
c = Client(${JSON.stringify(url)})
steps = list(c.generate(json.loads(${JSON.stringify(JSON.stringify(prompt))}), max_tokens=5, temperature=0.7, seed=3, logprobs=2))
slices = c.raw_attention({"chunks": [{"label": "a", "text": "one two three"}]}, layers=[0], heads=[0, 1], half=False)
print(json.dumps({"ids": [s["tokenId"] for s in steps], "text": "".join(s["text"] for s in steps),
                  "rows": [sum(r) for r in attention_values(slices[0])], "heads": [s["head"] for s in slices],
                  "score": c.score("The tower was built in", [" 1889."])[0]["logprob"]}))`);
    const stub = client('Generation', server.port);
    const viaGrpc = await streamed(stub, 'Generate', { prompt, sampling: { maxTokens: 5, temperature: 0.7, seed: { value: 3 }, logprobs: 2 } });
    stub.close();
    expect(out.ids).toEqual(viaGrpc.map((m: any) => m.tokenId));
    expect(out.text).toBe(viaGrpc.map((m: any) => m.text).join(''));
    // Each query row of a softmax sums to 1.
    for (const s of out.rows) expect(Math.abs(s - 1)).toBeLessThan(1e-5);
    expect(out.heads).toEqual([0, 1]);
    const [scores] = await directScoring(model.scorer).loglikelihood([{ context: 'The tower was built in', continuations: [' 1889.'] }]);
    expect(Math.abs(out.score - scores![0]!.logprob)).toBeLessThan(1e-5);
  });

  it('raises CtxprobeError with the code and the field named', async () => {
    const out = await library(`
c = Client(${JSON.stringify(url)})
errors = []
for call in (lambda: c.probe([{"chunks": [{"label": "a", "text": "x"}], "querylabels": ["a"]}]),
             lambda: Client(${JSON.stringify(url)}, model="nope").probe([{"chunks": [{"label": "a", "text": "x"}]}])):
    try:
        call()
    except CtxprobeError as e:
        errors.append([e.code, e.status, e.message])
print(json.dumps(errors))`);
    expect(out[0]).toEqual([3, 400, 'samples[0].querylabels: unknown field: ProbeSample has no field "querylabels"']);
    expect(out[1].slice(0, 2)).toEqual([5, 404]);
    expect(out[1][2]).toMatch(/no model named "nope"/);
  });

  it.skipIf(!hasMatplotlib)("runs the notebook example of docs/probes.md as printed", async () => {
    const page = fs.readFileSync(path.join(root, 'docs/probes.md'), 'utf8');
    const block = /^```python\n([\s\S]*?)^```/m.exec(page)![1]!;
    expect(block).toContain('Client("http://127.0.0.1:8000")');
    const dir = tempDir('notebook');
    // What the figure shows, read back from matplotlib after the example ran (field
    // defects #6: the layer axis had ticks at 0.5 steps, the legend sat over the bars and
    // the heatmap had no colour bar).
    const inspect = `
import json
fig.canvas.draw()
box = votes.get_window_extent()
legend = votes.get_legend().get_window_extent()
print(json.dumps({
  "layer_ticks": [float(t) for t in votes.get_xticks()],
  "layers": sample["votes"]["rows"],
  "legend_beside_bars": bool(legend.x0 >= box.x1),
  "axes": [a.get_label() for a in fig.axes],
  "colour_bar": [a.get_ylabel() for a in fig.axes if a.get_label() == "<colorbar>"],
  "upper_triangle_blank": bool(all(v != v for q, row in enumerate(heat.get_images()[0].get_array().filled(float("nan")).tolist()) for k, v in enumerate(row) if k > q)),
}))`;
    fs.writeFileSync(path.join(dir, 'notebook.py'), block.replace('http://127.0.0.1:8000', url) + inspect);
    const { stdout } = await run([path.join(dir, 'notebook.py')], { PYTHONPATH: path.dirname(script), MPLBACKEND: 'Agg' }, dir);
    const png = fs.readFileSync(path.join(dir, 'probe.png'));
    expect(png.subarray(1, 4).toString()).toBe('PNG');
    const shown = JSON.parse(stdout.trim().split('\n').at(-1)!);
    expect(shown.layer_ticks).toEqual(Array.from({ length: shown.layers }, (_, l) => l));
    expect(shown.legend_beside_bars).toBe(true);
    expect(shown.colour_bar).toEqual(['attention']);
    expect(shown.upper_triangle_blank).toBe(true);
  });
});

describe.skipIf(!hasPython)('Python client over HTTPS with a bearer token', () => {
  const TOKEN = 'py-http-token-0123456789abcdef';
  let model: LoadedModel;
  let server: CtxprobeServer;
  let certs: ReturnType<typeof makeCertificates>;
  beforeAll(async () => {
    certs = makeCertificates(tempDir('certs'));
    model = await loadModel({ name: 'm', path: makeFixture(FAMILY_FIXTURES.llama!).dir, threads: 1 });
    server = await CtxprobeServer.start({ port: 0, httpPort: 0, metricsPort: -1, tls: { cert: certs.serverCert, key: certs.serverKey }, authTokens: [TOKEN] });
    server.addModel(model);
    server.setServing();
  });
  afterAll(async () => server?.close());

  it('lists the models with the token over TLS, and is refused without it', async () => {
    const tokenFile = path.join(tempDir('token'), 'token');
    fs.writeFileSync(tokenFile, `${TOKEN}\n`);
    const env = { CTXPROBE_URL: `https://localhost:${server.httpPort}`, CTXPROBE_TLS_CA: certs.ca };
    const { stdout } = await run([script, '--token-file', tokenFile], env);
    expect(JSON.parse(stdout)).toEqual({ models: ['m'] });
    // The token file from the environment, as the client's help says.
    const viaEnv = await run([script], { ...env, CTXPROBE_TOKEN_FILE: tokenFile });
    expect(JSON.parse(viaEnv.stdout)).toEqual({ models: ['m'] });
    const refused = await run([script], env).catch((e) => e);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^ctxprobe: authorization: a valid "Bearer <token>" is required \(code 16, HTTP 401\)/);
  });
});
