// Deployment configuration, checked as far as this machine can: promtool on the
// Prometheus config, every Grafana query against the metrics a running server really
// exports, the Kubernetes manifests' wiring, the container files' safety basics.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import os from 'node:os';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { loadModel, type LoadedModel } from '../src/serving/repository.js';
import { CtxprobeServer } from '../src/server.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { scoringClient, scrape, unary } from './helpers.js';

const deploy = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../deploy');
const root = path.dirname(deploy);
const read = (p: string) => fs.readFileSync(path.join(deploy, p), 'utf8');
const promtool = ['/usr/bin/promtool', '/usr/local/bin/promtool'].find((p) => fs.existsSync(p));
if (!promtool) console.warn('skipping promtool check: no promtool (apt-get install prometheus)');

describe.skipIf(!promtool)('Prometheus config', () => {
  it('passes promtool check config, rules included', () => {
    const out = execFileSync(promtool!, ['check', 'config', path.join(deploy, 'prometheus/prometheus.yml')], { encoding: 'utf8' });
    expect(out).toMatch(/SUCCESS: .*prometheus\.yml is valid/);
    expect(out).toMatch(/SUCCESS: 4 rules found/);
  });
});

describe('Grafana dashboard against a running server', () => {
  let model: LoadedModel;
  let server: CtxprobeServer;
  let exported: Set<string>;
  beforeAll(async () => {
    model = await loadModel({ name: 'm', path: makeFixture(FAMILY_FIXTURES.llama!).dir, threads: 1 });
    server = await CtxprobeServer.start({ port: 0, metricsPort: 0 });
    server.addModel(model);
    server.setServing();
    const client = scoringClient(server.port);
    await unary(client, 'Score', { items: [{ contextText: 'User: hi', continuationsText: [' Bot: hello'] }] });
    client.close();
    exported = new Set([...(await scrape(server.metricsPort!)).keys()].map((k) => k.replace(/\{.*$/, '')));
  });
  afterAll(async () => server?.close());

  const dashboard = JSON.parse(read('grafana/dashboards/ctxprobe.json'));
  const exprs: string[] = dashboard.panels.flatMap((p: any) => p.targets.map((t: any) => t.expr));
  const metricNames = (expr: string) => [...expr.matchAll(/\b((?:ctxprobe|process|nodejs)_[a-z_]+)\b/g)].map((m) => m[1]!);

  it('covers throughput, tokens, batches, queue wait, latency, errors and memory', () => {
    const titles = dashboard.panels.map((p: any) => p.title.toLowerCase()).join(' | ');
    for (const word of ['throughput', 'tokens', 'batch size', 'queue wait', 'latency', 'errors', 'memory']) expect(titles).toContain(word);
    expect(exprs.some((e) => e.includes('histogram_quantile(0.99'))).toBe(true);
  });

  it('queries only metrics the server exports', () => {
    const used = new Set(exprs.flatMap(metricNames));
    expect(used.size).toBeGreaterThan(8);
    for (const name of used) expect(exported, `${name} is not exported`).toContain(name);
  });

  it('every ctxprobe metric the server exports is documented in docs/operations.md', () => {
    const page = fs.readFileSync(path.join(root, 'docs/operations.md'), 'utf8');
    const families = new Set([...exported].filter((n) => n.startsWith('ctxprobe_')).map((n) => n.replace(/_(bucket|sum|count)$/, '')));
    expect(families.size).toBeGreaterThan(10);
    expect([...families].filter((name) => !page.includes(name))).toEqual([]);
  });

  it('alerts and autoscaling name exported metrics too', () => {
    const alertExprs = (parseYaml(read('prometheus/alerts.yml')).groups[0].rules as any[]).map((r) => r.expr as string);
    const adapter = parseYaml(read('k8s/prometheus-adapter-rules.yaml')).rules.custom[0].seriesQuery as string;
    for (const name of [...alertExprs, adapter].flatMap(metricNames)) expect(exported).toContain(name);
  });
});

describe.skipIf(!promtool)('errors and alerts over both transports (promtool test rules)', () => {
  // gRPC codes and HTTP statuses share the `code` label of ctxprobe_requests_total.
  it('count HTTP 500 and 429 with INTERNAL and RESOURCE_EXHAUSTED, and HTTP 200 as no error', () => {
    const dashboard = JSON.parse(read('grafana/dashboards/ctxprobe.json'));
    const errors = dashboard.panels.find((p: any) => /errors/i.test(p.title)).targets[0].expr.replace('$__rate_interval', '5m');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxprobe-promtool-'));
    const series = (method: string, code: string, perMinute: number) => ({
      series: `ctxprobe_requests_total{instance="a",method="${method}",code="${code}"}`,
      values: `0+${perMinute}x30`,
    });
    const test = {
      rule_files: [path.join(deploy, 'prometheus/alerts.yml')],
      evaluation_interval: '1m',
      tests: [
        {
          interval: '1m',
          input_series: [
            series('Score', 'OK', 600),
            series('http /v1/completions', '200', 600),
            series('http /v1/completions', '500', 60),
            series('http /v1/completions', '429', 120),
          ],
          promql_expr_test: [
            {
              expr: errors,
              eval_time: '10m',
              exp_samples: [
                { labels: '{method="http /v1/completions",code="500"}', value: 1 },
                { labels: '{method="http /v1/completions",code="429"}', value: 2 },
              ],
            },
          ],
          alert_rule_test: [
            {
              eval_time: '15m',
              alertname: 'CtxprobeErrors',
              exp_alerts: [
                {
                  exp_labels: { severity: 'ticket', instance: 'a', method: 'http /v1/completions' },
                  exp_annotations: { summary: 'ctxprobe a answers http /v1/completions with internal errors' },
                },
              ],
            },
            {
              eval_time: '15m',
              alertname: 'CtxprobeQueueFull',
              exp_alerts: [
                {
                  exp_labels: { severity: 'ticket', instance: 'a' },
                  exp_annotations: { summary: 'ctxprobe a refuses work: its queue is full' },
                },
              ],
            },
          ],
        },
      ],
    };
    fs.writeFileSync(path.join(dir, 'test.yml'), JSON.stringify(test));
    const run = spawnSync(promtool!, ['test', 'rules', path.join(dir, 'test.yml')], { encoding: 'utf8' });
    expect(run.status, run.stdout + run.stderr).toBe(0);
  });

  it('ship the same alerts to the Prometheus Operator as a PrometheusRule', () => {
    const rule = parseYaml(read('k8s/prometheusrule.yaml'));
    expect(rule.kind).toBe('PrometheusRule');
    expect(rule.spec).toEqual(parseYaml(read('prometheus/alerts.yml')));
    expect(parseYaml(read('k8s/kustomization.yaml')).resources).toContain('prometheusrule.yaml');
  });
});

describe('Kubernetes manifests', () => {
  const kustomization = parseYaml(read('k8s/kustomization.yaml'));
  const docs = (kustomization.resources as string[]).flatMap((f) => parseAllDocuments(read(`k8s/${f}`)).map((d) => d.toJS()));
  const byKind = (kind: string) => docs.filter((d) => d.kind === kind);

  it('parse, and the kustomization lists files that exist', () => {
    expect(docs.length).toBe((kustomization.resources as string[]).length);
    for (const d of docs) expect(d.apiVersion && d.kind && d.metadata?.name).toBeTruthy();
  });

  it('request a GPU, probe gRPC health, drain gracefully, run unprivileged', () => {
    const [deployment] = byKind('Deployment');
    const pod = deployment.spec.template.spec;
    const c = pod.containers[0];
    expect(c.resources.limits['nvidia.com/gpu']).toBe(1);
    expect(c.resources.limits.memory).toBeTruthy();
    const grpcPort = c.ports.find((p: any) => p.name === 'grpc').containerPort;
    // The main port speaks TLS, which Kubernetes' own gRPC probe cannot: the probes go to
    // the plaintext, health-only port the server is told to open.
    expect(c.args).toContain('--tls-cert');
    const healthPort = c.ports.find((p: any) => p.name === 'health').containerPort;
    expect(healthPort).not.toBe(grpcPort);
    expect(c.args[c.args.indexOf('--health-port') + 1]).toBe(String(healthPort));
    for (const probe of ['startupProbe', 'readinessProbe', 'livenessProbe']) expect(c[probe].grpc.port).toBe(healthPort);
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(60);
    expect(pod.securityContext.runAsNonRoot).toBe(true);
    expect(c.securityContext.readOnlyRootFilesystem).toBe(true);
    expect(c.volumeMounts.every((m: any) => m.readOnly || m.name === 'tmp')).toBe(true);
    // Secrets come from Secret objects, none of which live in the repository.
    expect(c.env.find((e: any) => e.name === 'CTXPROBE_AUTH_TOKEN').valueFrom.secretKeyRef.name).toBe('ctxprobe-auth');
    expect(byKind('Secret')).toHaveLength(0);
  });

  it('wire the headless Service, PodMonitor, HPA and PDB to the Deployment', () => {
    const [deployment] = byKind('Deployment');
    const labels = deployment.spec.template.metadata.labels;
    const matches = (sel: Record<string, string>) => Object.entries(sel).every(([k, v]) => labels[k] === v);
    const [service] = byKind('Service');
    expect(service.spec.clusterIP).toBe('None');
    expect(matches(service.spec.selector)).toBe(true);
    const portNames = deployment.spec.template.spec.containers[0].ports.map((p: any) => p.name);
    for (const p of service.spec.ports) expect(portNames).toContain(p.targetPort);
    const [monitor] = byKind('PodMonitor');
    expect(matches(monitor.spec.selector.matchLabels)).toBe(true);
    expect(portNames).toContain(monitor.spec.podMetricsEndpoints[0].port);
    const [hpa] = byKind('HorizontalPodAutoscaler');
    expect(hpa.spec.scaleTargetRef).toMatchObject({ kind: 'Deployment', name: deployment.metadata.name });
    expect(hpa.spec.metrics[0].pods.metric.name).toBe('ctxprobe_queued_items');
    const [pdb] = byKind('PodDisruptionBudget');
    expect(matches(pdb.spec.selector.matchLabels)).toBe(true);
    const models = byKind('ConfigMap')[0].data;
    for (const json of Object.values(models) as string[]) expect(JSON.parse(json).path).toMatch(/^\/checkpoints\//);
  });
});

describe('containers and compose', () => {
  it('run as a non-root user with a gRPC health check; the CUDA image installs the CUDA provider', () => {
    for (const file of ['docker/Dockerfile', 'docker/Dockerfile.cuda']) {
      const text = read(file);
      const user = [...text.matchAll(/^USER\s+(\S+)/gm)].map((m) => m[1]);
      expect(user.at(-1)).not.toMatch(/^(root|0)$/);
      expect(text).toMatch(/HEALTHCHECK[\s\S]*bin\/ctxprobe\.js", "health"/);
    }
    const cuda = read('docker/Dockerfile.cuda');
    expect(cuda).toMatch(/^FROM nvidia\/cuda:12\.[\d.]+-cudnn-runtime/m);
    // The runtime stage fixes glibc's mmap threshold (long rows' memory goes back at free).
    for (const file of ['docker/Dockerfile', 'docker/Dockerfile.cuda'])
      expect(read(file).split(/^FROM /m).at(-1)).toMatch(/^ENV MALLOC_MMAP_THRESHOLD_=1048576$/m);
    expect(cuda).toMatch(/ONNXRUNTIME_NODE_INSTALL=cuda12 node script\/install\.js/);
  });

  it('ship compiled JavaScript: the runtime stage holds dist/ and production dependencies, and runs from them', async () => {
    for (const file of ['docker/Dockerfile', 'docker/Dockerfile.cuda']) {
      const runtime = read(file)
        .split(/^FROM /m)
        .at(-1)!;
      for (const part of ['dist', 'node_modules', 'bin', 'proto', 'models', 'package.json'])
        expect(runtime).toMatch(new RegExp(`^COPY .*\\b${part}\\b`, 'm'));
      expect(read(file)).toMatch(/npm ci && npm prune --omit=dev/);
      // npm ci's build step runs scripts/build-assets.mjs (OpenAPI, the viewer's files).
      expect(read(file).split(/^FROM /m)[1]).toMatch(/^COPY scripts \.\/scripts$/m);
      expect(runtime).not.toMatch(/tsx|src\//);
    }
    // The same layout here: compiled dist/, production dependencies only (no tsx, no
    // TypeScript), then the CLI the HEALTHCHECK and ENTRYPOINT run.
    const app = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxprobe-image-'));
    for (const f of ['package.json', 'package-lock.json', '.npmrc']) fs.copyFileSync(path.join(root, f), path.join(app, f));
    execFileSync('npm', ['ci', '--omit=dev', '--ignore-scripts', '--prefer-offline', '--no-audit', '--no-fund'], {
      cwd: app,
      stdio: 'pipe',
    });
    for (const dir of ['dist', 'bin', 'proto', 'models']) fs.cpSync(path.join(root, dir), path.join(app, dir), { recursive: true });
    expect(fs.existsSync(path.join(app, 'node_modules/tsx'))).toBe(false);
    expect(fs.existsSync(path.join(app, 'node_modules/typescript'))).toBe(false);
    const help = execFileSync(process.execPath, [path.join(app, 'bin/ctxprobe.js'), 'serve', '--help'], { encoding: 'utf8' });
    expect(help).toMatch(/--tls-cert/);
    const health = spawnSync(
      process.execPath,
      [path.join(app, 'bin/ctxprobe.js'), 'health', '--address', '127.0.0.1:1', '--timeout-ms', '200'],
      {
        encoding: 'utf8',
      },
    );
    expect(health.status).toBe(1);
    expect(health.stdout).toMatch(/^UNREACHABLE/);
    // It serves from that layout alone: the default model, the HTTP/JSON API, its OpenAPI
    // document and the viewer with its scripts (built into dist/, no src/ there).
    const server = spawn(process.execPath, [path.join(app, 'bin/ctxprobe.js'), 'serve', '--port', '0', '--http-port', '0', '--metrics-port', '-1'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    try {
      const httpPort = await new Promise<number>((resolve, reject) => {
        let text = '';
        server.stderr!.on('data', (d) => {
          text += d;
          const listening = text.split('\n').flatMap((l) => (l.includes('"listening"') ? [JSON.parse(l)] : []))[0];
          if (listening && text.includes('"serving"')) resolve(listening.httpPort);
        });
        server.on('exit', (code) => reject(new Error(`serve exited ${code}: ${text}`)));
      });
      const base = `http://127.0.0.1:${httpPort}`;
      for (const route of ['/ui/', '/ui/style.css', '/favicon.ico', '/ui/src/http/ui/app.js', '/ui/src/figures/charts.js', '/ui/src/eval/records.js', '/ui/src/common/floats.js', '/ui/vendor/d3.min.js', '/ui/vendor/plot.umd.min.js', '/openapi.json', '/v1/list-models']) {
        const res = await fetch(base + route);
        expect(res.status, route).toBe(200);
      }
      expect(((await (await fetch(`${base}/openapi.json`)).json()) as any).paths['/v1/probe']).toBeDefined();
    } finally {
      server.kill('SIGTERM');
    }
    fs.rmSync(app, { recursive: true, force: true });
  }, 120_000);

  it('compose mounts models read-only, scrapes the server, and keeps secrets out of the repo', () => {
    const compose = parseYaml(read('compose.yaml'));
    for (const name of ['ctxprobe', 'ctxprobe-gpu']) {
      for (const v of compose.services[name].volumes) expect(v).toMatch(/:ro$/);
    }
    expect(compose.services['ctxprobe-gpu'].deploy.resources.reservations.devices[0].driver).toBe('nvidia');
    const prom = parseYaml(read('prometheus/prometheus.yml'));
    expect(prom.scrape_configs[0].static_configs[0].targets).toEqual(['ctxprobe:9464']);
    expect(compose.secrets.ctxprobe_token.file).toBe('./secrets/ctxprobe_token');
    expect(read('.gitignore')).toMatch(/^secrets\/$/m);
  });
});

describe("bookworm-backports from apt's own mirror (scripts/add-backports.sh, run by .ci/run)", () => {
  /** apt's folder with these files; the script run on it: what it said and what it wrote. */
  function addBackports(files: Record<string, string>) {
    const etc = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxprobe-apt-'));
    fs.mkdirSync(path.join(etc, 'sources.list.d'));
    for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(etc, name), text);
    const run = () =>
      execFileSync('bash', [path.join(root, 'scripts/add-backports.sh')], { env: { ...process.env, APT_ETC_DIR: etc }, encoding: 'utf8' });
    const said = run();
    const written = () =>
      Object.fromEntries(
        fs
          .readdirSync(path.join(etc, 'sources.list.d'))
          .filter((f) => f.startsWith('bookworm-backports'))
          .map((f) => [f, fs.readFileSync(path.join(etc, 'sources.list.d', f), 'utf8')]),
      );
    const first = written();
    // Idempotent: a second run finds the source and writes nothing.
    expect(run()).toMatch(/^bookworm-backports is already in apt's sources/);
    expect(written()).toEqual(first);
    return { said, written: first };
  }

  it("one-line format: the bookworm line's mirror and options (a snapshot, its key), not deb.debian.org", () => {
    const snapshot =
      '[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg check-valid-until=no] http://snapshot.debian.org/archive/debian/20250520T000000Z';
    const { written } = addBackports({
      'sources.list': [
        '# deb http://deb.debian.org/debian bookworm main',
        `deb-src ${snapshot} bookworm main`,
        `deb ${snapshot} bookworm main contrib # the mirror`,
        'deb http://security.debian.org/debian-security bookworm-security main',
        '',
      ].join('\n'),
    });
    expect(written).toEqual({ 'bookworm-backports.list': `deb ${snapshot} bookworm-backports main\n` });
  });

  it('deb822 format: the enabled bookworm stanza copied, its suite and components replaced', () => {
    const { written } = addBackports({
      'sources.list.d/old.sources': 'Types: deb\nURIs: http://old.example.org/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n',
      'sources.list.d/debian.sources': [
        'Types: deb deb-src',
        '# a mirror of our own',
        'URIs: http://mirror.example.org/debian',
        'Suites: bookworm bookworm-updates',
        'Components: main non-free-firmware',
        'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg',
        '',
        'Types: deb',
        'URIs: http://mirror.example.org/debian-security',
        'Suites: bookworm-security',
        'Components: main',
        '',
      ].join('\n'),
    });
    expect(written).toEqual({
      'bookworm-backports.sources': [
        'Types: deb',
        'URIs: http://mirror.example.org/debian',
        'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg',
        'Suites: bookworm-backports',
        'Components: main',
        '',
      ].join('\n'),
    });
  });

  it('deb.debian.org only when no bookworm source is found; nothing when backports is already there', () => {
    const none = addBackports({ 'sources.list': '# nothing enabled\n' });
    expect(none.written).toEqual({ 'bookworm-backports.list': 'deb http://deb.debian.org/debian bookworm-backports main\n' });
    expect(none.said).toMatch(/no bookworm source/);
    const there = addBackports({
      'sources.list.d/debian.sources':
        'Types: deb\nURIs: http://m.example.org/debian\nSuites: bookworm bookworm-backports\nComponents: main\n',
    });
    expect(there.written).toEqual({});
    expect(fs.readFileSync(path.join(root, '.ci/run'), 'utf8')).toMatch(/^\s+scripts\/add-backports\.sh &&$/m);
    expect(fs.readFileSync(path.join(root, '.ci/run'), 'utf8')).not.toMatch(/deb\.debian\.org/);
  });
});
