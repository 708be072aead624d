// The load-time scan of every weight for NaN and infinity (src/checkpoint/validate.ts):
// GB/s over a checkpoint of F32, F16 and BF16 tensors (1 GiB each by default,
// BENCH_SCAN_GIB to change), read from the page cache (a first pass warms it) and, where
// the process may drop it (root), cold from disk. Prints figures, asserts nothing.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SafetensorsCheckpoint } from '../src/checkpoint/safetensors.js';
import { findNonFinite } from '../src/checkpoint/validate.js';

const gib = Number(process.env.BENCH_SCAN_GIB ?? 1);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxprobe-scan-'));
try {
  // One file per dtype, written in 64 MiB tensors of finite values (the scan's speed does
  // not depend on them; a NaN would end it early).
  const tensorBytes = 64 * 2 ** 20;
  const block = Buffer.alloc(tensorBytes);
  for (let i = 0; i < tensorBytes; i += 2) block.writeUInt16LE(0x3c00 + (i % 1024), i); // 1.0…: finite as F16, BF16 and F32 words
  const count = Math.round((gib * 2 ** 30) / tensorBytes);
  const files: Record<string, string> = {};
  for (const [code, bytes] of [
    ['F32', 4],
    ['F16', 2],
    ['BF16', 2],
  ] as const) {
    const header: Record<string, unknown> = {};
    for (let t = 0; t < count; t++)
      header[`t${t}`] = { dtype: code, shape: [tensorBytes / bytes], data_offsets: [t * tensorBytes, (t + 1) * tensorBytes] };
    let json = JSON.stringify(header);
    json += ' '.repeat((8 - (json.length % 8)) % 8);
    const file = path.join(dir, `${code}.safetensors`);
    const fd = fs.openSync(file, 'w');
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(json.length));
    fs.writeSync(fd, Buffer.concat([len, Buffer.from(json)]));
    for (let t = 0; t < count; t++) fs.writeSync(fd, block);
    fs.closeSync(fd);
    files[code] = file;
  }
  for (const [code, file] of Object.entries(files)) {
    const sub = fs.mkdtempSync(path.join(dir, `${code}-`));
    fs.renameSync(file, path.join(sub, 'model.safetensors'));
    const tensors = [...new SafetensorsCheckpoint(sub).tensors].map(([name, t]) => ({ name, ...t }));
    const bytes = tensors.reduce((n, t) => n + t.length, 0);
    const times: number[] = [];
    const cpu: number[] = [];
    for (let rep = 0; rep < 4; rep++) {
      const [started, used] = [performance.now(), process.cpuUsage()];
      await findNonFinite(tensors);
      times.push((performance.now() - started) / 1000);
      const { user, system } = process.cpuUsage(used);
      cpu.push((user + system) / 1e6);
    }
    // Per CPU second as well: on a shared machine the wall clock measures the neighbours.
    const rates = (s: number[]) =>
      s
        .slice(1)
        .map((x) => (bytes / x / 1e9).toFixed(2))
        .join(', ');
    console.log(
      `${code}: ${(bytes / 2 ** 30).toFixed(1)} GiB from the page cache: ${rates(times)} GB/s wall, ${rates(cpu)} GB per CPU second (first pass ${(bytes / times[0]! / 1e9).toFixed(2)} GB/s)`,
    );
  }
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
