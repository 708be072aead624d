// `ctxprobe serve` logs JSON lines on stderr, but native code in its process writes there
// too, raw. Measured (onnxruntime-node 1.30, lavapipe): Dawn, under the WebGPU provider,
// prints `Warning: maxDynamicUniformBuffersPerPipelineLayout artificially reduced …` (and
// its storage-buffer twin) with fprintf when it opens a Vulkan adapter whose limits exceed
// its own, and has no switch for it; onnxruntime's logger prints
// `\e[0;93m… [W:onnxruntime:, graph.cc:…] …\e[m` at its default level (raising the level
// loses a warning rather than logging it). Node cannot point its own native code's fd 2
// elsewhere (no dup2), so `bin/ctxprobe.js serve` runs the server as a child whose stderr
// is a pipe this process reads: a JSON line passes as it is, any other becomes one
// (`"event":"native_log"`). Signals are passed on (the server takes a signal that arrives
// twice within 100 ms as one: a process group's signal reaches both processes), and the
// server's exit code is this process's.
import { spawn } from 'node:child_process';
import os from 'node:os';
import { StringDecoder } from 'node:string_decoder';
import { LoadBar } from './load-bar.js';

/** Set in the server's environment: it is the supervised child. */
export const SUPERVISED_ENV = 'CTXPROBE_SUPERVISED';

const FORWARDED = ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGUSR2'] as const;
const ORT_LEVELS: Record<string, string> = { V: 'debug', I: 'info', W: 'warn', E: 'error', F: 'error' };

const line = (fields: Record<string, unknown>) => JSON.stringify({ time: new Date().toISOString(), ...fields });

/** A line of the server's stderr as a JSON line: itself when it is one, none when blank. */
export function jsonLine(raw: string): string | undefined {
  const text = raw.replace(/\x1b\[[0-9;]*[A-Za-z]/g, '').trimEnd();
  if (text.trim() === '') return undefined;
  if (text.startsWith('{')) {
    try {
      if (typeof JSON.parse(text) === 'object') return text;
    } catch {
      /* not JSON: wrapped below */
    }
  }
  const ort = /\[([VIWEF]):onnxruntime:/.exec(text);
  const level = ort ? ORT_LEVELS[ort[1]!] : /^(error|fatal)\b/i.test(text) ? 'error' : 'warn';
  return line({ level, event: 'native_log', source: ort ? 'onnxruntime' : 'native', message: text });
}

/** Run `script args…` as the server, relaying its stderr as JSON lines; exit as it exits. */
export function superviseServe(script: string, args: string[]): void {
  // The child must not supervise in turn (bin/ctxprobe.js reads the variable).
  if (process.env[SUPERVISED_ENV]) throw new Error(`superviseServe: ${SUPERVISED_ENV} is set: this process is the server`);
  const child = spawn(process.execPath, [...process.execArgv, script, ...args], {
    stdio: ['inherit', 'inherit', 'pipe', 'ipc'],
    env: { ...process.env, [SUPERVISED_ENV]: '1' },
  });
  // On a terminal a load's progress is a bar (load-bar.ts); elsewhere every line is JSON.
  const bar = process.stderr.isTTY ? new LoadBar(process.stderr) : undefined;
  const write = (text: string | undefined) => text !== undefined && (bar ? bar.show(text) : process.stderr.write(text + '\n'));
  const message = "the server runs as serverPid; this process relays its stderr as JSON lines (native libraries' too)";
  write(line({ level: 'info', event: 'supervisor', pid: process.pid, serverPid: child.pid, message }));
  const decoder = new StringDecoder('utf8');
  let pending = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    const lines = (pending + decoder.write(chunk)).split('\n');
    pending = lines.pop()!;
    for (const l of lines) write(jsonLine(l));
  });
  for (const signal of FORWARDED) process.on(signal, () => child.kill(signal));
  child.on('error', (e) => {
    write(line({ level: 'error', event: 'supervisor', message: `cannot start the server: ${e.message}` }));
    process.exit(1);
  });
  // Exit once the server has exited and its last line is read: the pipe closes then (or
  // within 2 s, should something the server started still hold it).
  let exit: number | undefined;
  const finish = () => {
    write(jsonLine(pending + decoder.end()));
    process.exit(exit);
  };
  child.stderr!.on('close', () => exit !== undefined && finish());
  child.on('exit', (code, signal) => {
    exit = code ?? 128 + (os.constants.signals[signal!] ?? 0);
    if (signal) write(line({ level: 'error', event: 'supervisor', message: `the server was killed by ${signal}` }));
    if (child.stderr!.closed) finish();
    else setTimeout(finish, 2000);
  });
}

/** In the server: stop, as on SIGTERM, when the supervisor is gone (its IPC channel closes). */
export function followSupervisor(): void {
  if (!process.channel) return;
  process.channel.unref();
  process.on('disconnect', () => process.kill(process.pid, 'SIGTERM'));
}
