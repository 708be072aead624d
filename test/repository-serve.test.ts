// A model repository with a model that cannot load: `ctxprobe serve --models DIR` serves the
// ones that load and names the ones that do not (it used to serve none).
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { serveCli } from './cli-serve.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { healthClient, postJson, scoringClient, unary } from './helpers.js';

describe('ctxprobe serve --models with models that cannot load', () => {
  it('serves the good model, logs each failed one with its file and reason, and refuses calls naming one with the reason', async () => {
    const repo = tempDir('repo');
    const good = makeFixture(FAMILY_FIXTURES.llama!).dir;
    // A checkpoint whose weights file was cut short, and a config that is not JSON.
    const broken = makeFixture(FAMILY_FIXTURES.llama!).dir;
    fs.truncateSync(path.join(broken, 'model.safetensors'), 4000);
    fs.writeFileSync(path.join(repo, 'a-good.json'), JSON.stringify({ name: 'good', path: good }));
    fs.writeFileSync(path.join(repo, 'b-broken.json'), JSON.stringify({ name: 'broken', path: broken }));
    fs.writeFileSync(path.join(repo, 'c-garbled.json'), '{"name": "garbled", ');
    const s = await serveCli('', ['--models', repo]);
    try {
      const failed = s.lines.filter((l) => l.event === 'model_failed');
      expect(failed.map((l) => l.model).sort()).toEqual(['broken', 'c-garbled']);
      const brokenLine = failed.find((l) => l.model === 'broken')!;
      expect(brokenLine).toMatchObject({ level: 'error', config: path.join(repo, 'b-broken.json'), file: broken });
      expect(brokenLine.message).toMatch(/model\.safetensors: .*truncated/);
      expect(failed.find((l) => l.model === 'c-garbled')).toMatchObject({
        file: path.join(repo, 'c-garbled.json'),
        message: expect.stringMatching(/c-garbled\.json: not valid JSON/),
      });
      expect(s.lines.find((l) => l.event === 'serving')).toMatchObject({ models: ['good'], failedModels: ['c-garbled', 'broken'] });

      const base = `http://127.0.0.1:${s.httpPort}`;
      const models = await (await fetch(`${base}/v1/models`)).json();
      expect(models.data.map((m: { id: string }) => m.id)).toEqual(['good']);
      const grpcClient = scoringClient(s.grpcPort);
      expect((await unary(grpcClient, 'ListModels', {})).models.map((m: { name: string }) => m.name)).toEqual(['good']);

      const ok = await postJson(base, '/v1/completions', { model: 'good', prompt: 'Hello', max_tokens: 0, echo: true, logprobs: 0 });
      expect(ok.status).toBe(200);
      const refused = await postJson(base, '/v1/completions', { model: 'broken', prompt: 'Hello', max_tokens: 0, echo: true });
      expect(refused.status).toBe(404);
      expect(refused.body.error.message).toMatch(/model "broken" is not served: it failed to load \(.*model\.safetensors.*truncated/);
      const grpcRefused = await unary(grpcClient, 'Score', {
        model: 'broken',
        items: [{ contextText: 'Hi', continuationsText: [' there'] }],
      }).catch((e) => e);
      expect(grpcRefused.code).toBe(5); // NOT_FOUND
      expect(grpcRefused.details).toMatch(/failed to load/);

      // The server is SERVING (a model answers); each model's own health says which.
      const health = healthClient(s.grpcPort);
      const status = async (service: string) => (await unary(health, 'Check', { service })).status;
      expect(await status('')).toBe('SERVING');
      expect(await status('model/good')).toBe('SERVING');
      expect(await status('model/broken')).toBe('NOT_SERVING');
      expect((await fetch(`${base}/health`)).status).toBe(200);
      grpcClient.close();
      health.close();
      expect(await s.stop()).toBe(0);
    } finally {
      s.child.kill('SIGKILL');
    }
  }, 60_000);

  it('fails the start, naming every model and why, when none loads', async () => {
    const repo = tempDir('repo');
    const broken = makeFixture(FAMILY_FIXTURES.llama!).dir;
    fs.truncateSync(path.join(broken, 'model.safetensors'), 4000);
    fs.writeFileSync(path.join(repo, 'broken.json'), JSON.stringify({ path: broken }));
    fs.writeFileSync(path.join(repo, 'missing.json'), JSON.stringify({ path: path.join(repo, 'nowhere') }));
    const err = await serveCli('', ['--models', repo]).then(
      () => undefined,
      (e) => e,
    );
    expect(err.code).toBe(1);
    const last = err.lines.filter((l: Record<string, any>) => l.level === 'error').at(-1);
    expect(last.message).toMatch(/no model of .* could be loaded \(broken: .*truncated.*; missing: .*nowhere: does not exist; a model is .*\)/);
  }, 60_000);
});
