// Start the real `ctxprobe serve` (bin/ctxprobe.js, compiled) as users do, with flags and
// environment, and read its JSON log lines for the bound ports.
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export interface Served {
  /** The process started: it relays the server's stderr as JSON lines (src/cli/stderr-json.ts). */
  child: ChildProcess;
  /** The server's own process (its memory, for instance), a child of `child`. */
  serverPid: number;
  lines: Record<string, any>[];
  grpcPort: number;
  httpPort: number;
  metricsPort: number;
  /** --health-port's bound port, when given. */
  healthPort?: number;
  /** SIGTERM, then the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  exited: Promise<number | null>;
}

/** `ctxprobe serve --model DIR` (or, with DIR empty, the repository `args` name) on free
 * ports; resolves at `serving`, rejects with the logged error if the process exits first. */
export function serveCli(modelDir: string, args: string[] = [], env: Record<string, string> = {}): Promise<Served> {
  const child = spawn(
    process.execPath,
    [
      path.join(ROOT, 'bin/ctxprobe.js'),
      'serve',
      ...(modelDir ? ['--model', modelDir] : []),
      '--port',
      '0',
      '--http-port',
      '0',
      '--metrics-port',
      '0',
      '--threads',
      '1',
      ...args,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } },
  );
  const lines: Record<string, any>[] = [];
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  return new Promise((resolve, reject) => {
    let buf = '';
    child.stderr!.on('data', (d) => {
      buf += d;
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        const text = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        let line: Record<string, any>;
        try {
          line = JSON.parse(text);
        } catch {
          line = { level: 'raw', message: text };
        }
        lines.push(line);
        if (line.event === 'serving') {
          const listening = lines.find((l) => l.event === 'listening')!;
          resolve({
            child,
            serverPid: Number(lines.find((l) => l.event === 'supervisor')?.serverPid ?? child.pid),
            lines,
            grpcPort: Number(String(listening.address).split(':').pop()),
            httpPort: listening.httpPort,
            metricsPort: listening.metricsPort,
            healthPort: listening.healthPort,
            exited,
            stop: (signal = 'SIGTERM') => {
              child.kill(signal);
              return exited;
            },
          });
        }
      }
    });
    exited.then((code) => reject(Object.assign(new Error(lines.map((l) => l.message ?? '').join(' | ')), { code, lines })));
  });
}
