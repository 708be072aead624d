// Where onnxruntime put each node of a graph: a provider without a kernel for a node runs
// it on the CPU provider without a word (onnxruntime-node 1.30's WebGPU provider ran every
// FusedMatMul, the log-softmax and the one-hots of our graphs on the CPU, found only in its
// verbose log). The only record of the assignment is that log ("Node placements", written
// to the process's stderr at verbose level), so a child process creates the session with
// it on and we read its stderr: the node list per provider, and with the graph's element
// types, which CPU nodes compute on floats (a fallback) and which are index arithmetic
// (shape and position integers, which stay on the CPU by design: the provider has no int64
// kernels, onnxruntime-node cannot turn them on, WEBGPU-NODE.md §2).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import onnxProto from 'onnx-proto';
import type ort from 'onnxruntime-node';
import { inferTypes, type Graph } from '../graph/types.js';

export interface PlacedNode {
  op: string;
  name: string;
}

export interface Placements {
  /** Nodes per provider, by onnxruntime's name for it (`CPUExecutionProvider`, …). */
  byProvider: Map<string, PlacedNode[]>;
  /** Nodes left to the CPU provider that read or write a float tensor. */
  floatOnCpu: PlacedNode[];
  /** Nodes left to the CPU provider, counted by op type. */
  cpuOps: Record<string, number>;
  /** With `waits`: the places a run stops for the device — each copy to the host
   * onnxruntime inserted (`MemcpyToHost`, named by what it copies) and each If (its branch
   * runs as a subgraph, which waits as well). */
  waits?: PlacedNode[];
  /** With `waits`: what a run copies from the host to the device, each its own staging
   * buffer (onnxruntime's WebGPU provider; the costliest node of a decode step on the host,
   * index-feeds.ts): the graph inputs a provider's node reads in device memory (copied as
   * the run starts), and each `MemcpyFromHost` inserted (named by what it copies). */
  uploads?: PlacedNode[];
  seconds: number;
}

/** Inputs the WebGPU provider's kernels read on the host (its kernel definitions' CPU
 * memory inputs: shapes, axes, sizes, counts): a host tensor there is not copied. */
const HOST_MEMORY_INPUTS: Record<string, number[]> = {
  Reshape: [1],
  Expand: [1],
  Unsqueeze: [1],
  Squeeze: [1],
  Slice: [1, 2, 3, 4],
  Split: [1],
  Tile: [1],
  TopK: [1],
  Range: [0, 1, 2],
  ReduceMax: [1],
  ReduceSum: [1],
  ReduceMean: [1],
};

const CHILD = `
const [ortPath, modelPath, optionsPath, optimizedPath] = process.argv.slice(1);
const ort = (await import(ortPath)).default;
const options = JSON.parse(await (await import('node:fs')).promises.readFile(optionsPath, 'utf8'));
if (optimizedPath) options.optimizedModelFilePath = optimizedPath;
const session = await ort.InferenceSession.create(modelPath, { ...options, logSeverityLevel: 0, logVerbosityLevel: 0 });
await session.release();
`;

/** onnxruntime's verbose line as it starts loading the initializers (session_state_utils.cc). */
const WEIGHTS_LOAD_STARTS = 'SaveInitializedTensors] Saving initialized tensors';

/** Create a session of `model` with `options` in a child process and read back where each
 * node went. Options must be plain data (what JSON carries). `waits` also saves the graph
 * as onnxruntime optimized it, with its copies, to count them: small models only (the
 * weights are written with it). */
export async function placements(
  model: Uint8Array,
  options: ort.InferenceSession.SessionOptions,
  { waits = false } = {},
): Promise<Placements> {
  const started = performance.now();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxprobe-placements-'));
  try {
    const modelPath = path.join(dir, 'model.onnx');
    const optionsPath = path.join(dir, 'options.json');
    fs.writeFileSync(modelPath, model);
    fs.writeFileSync(optionsPath, JSON.stringify(options));
    const ortPath = import.meta.resolve('onnxruntime-node');
    const optimizedPath = path.join(dir, 'optimized.onnx');
    const stderr = await new Promise<string>((resolve, reject) => {
      const child = spawn(
        process.execPath,
        ['--input-type=module', '-e', CHILD, ortPath, modelPath, optionsPath, ...(waits ? [optimizedPath] : [])],
        {
          stdio: ['ignore', 'ignore', 'pipe'],
          env: { ...process.env, ORT_DISABLE_TELEMETRY: '1' },
        },
      );
      const chunks: Buffer[] = [];
      // The placements are logged before onnxruntime loads the weights and uploads them to
      // the device ("Saving initialized tensors"): the child stops there, so a load does not
      // upload its weights twice (unless `waits` wants the optimized model written at the end).
      let tail = '';
      let stopped = false;
      child.stderr.on('data', (c: Buffer) => {
        chunks.push(c);
        tail = (tail + c.toString('latin1')).slice(-4096);
        if (!waits && !stopped && tail.includes(WEIGHTS_LOAD_STARTS)) {
          stopped = true;
          child.kill('SIGKILL');
        }
      });
      child.on('error', reject);
      child.on('close', (code, signal) => {
        const text = Buffer.concat(chunks).toString('utf8');
        if (code === 0 || stopped) resolve(text);
        else reject(new Error(`the placement check's session failed (${signal ?? `exit ${code}`}): ${lastError(text)}`));
      });
    });
    const decoded = onnxProto.onnx.ModelProto.decode(model);
    const byProvider = parsePlacements(stderr, decoded.graph!);
    if (byProvider.size === 0) throw new Error('the placement check found no "Node placements" in onnxruntime\'s verbose log');
    const floats = floatNodes(decoded.graph!);
    const cpu = byProvider.get('CPUExecutionProvider') ?? [];
    const cpuOps: Record<string, number> = {};
    for (const n of cpu) cpuOps[n.op] = (cpuOps[n.op] ?? 0) + 1;
    return {
      byProvider,
      floatOnCpu: cpu.filter((n) => floats.has(n.name)),
      cpuOps,
      ...(waits && optimized(decoded.graph!, onnxProto.onnx.ModelProto.decode(fs.readFileSync(optimizedPath)).graph!, byProvider)),
      seconds: (performance.now() - started) / 1000,
    };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** onnxruntime's verbose "Node placements" block: ` Node(s) placed on [EP]. Number of nodes: N`
 * followed by `  Op (name)` lines; or, when every node went to one provider, the one line
 * ` All nodes placed on [EP]. Number of nodes: N` (then the nodes are `graph`'s: a KV layout
 * graph on WebGPU is all the provider's). */
export function parsePlacements(log: string, graph?: Graph): Map<string, PlacedNode[]> {
  const out = new Map<string, PlacedNode[]>();
  const all = /All nodes placed on \[(\w+)\]/.exec(log);
  if (all)
    return out.set(
      all[1]!,
      (graph?.node ?? []).map((n) => ({ op: n.opType!, name: n.name! })),
    );
  let current: PlacedNode[] | undefined;
  for (const line of log.split('\n')) {
    const header = /Node\(s\) placed on \[(\w+)\]/.exec(line);
    if (header) {
      current = out.get(header[1]!) ?? [];
      out.set(header[1]!, current);
      continue;
    }
    const node = /VerifyEachNodeIsAssignedToAnEp\]\s{2,}(\S+) \((.*)\)\s*$/.exec(line);
    if (node && current) current.push({ op: node[1]!, name: node[2]! });
    else if (current && !line.includes('VerifyEachNodeIsAssignedToAnEp')) current = undefined;
  }
  return out;
}

/** Names of the nodes (If branches included) that read or write a float tensor. */
function floatNodes(graph: Graph, outer?: Map<string, string>, into = new Set<string>()): Set<string> {
  const types = inferTypes(graph, outer);
  for (const node of graph.node ?? []) {
    const values = [...(node.input ?? []), ...(node.output ?? [])].filter((v) => v !== '');
    if (values.some((v) => /float|double/.test(types.get(v) ?? ''))) into.add(node.name!);
    for (const a of node.attribute ?? []) if (a.g) floatNodes(a.g, types, into);
  }
  return into;
}

/** What the optimized graph waits for and uploads (`Placements.waits`, `uploads`). */
function optimized(graph: Graph, optimizedGraph: Graph, byProvider: Map<string, PlacedNode[]>): Pick<Placements, 'waits' | 'uploads'> {
  // The nodes a device provider took (a node in neither list was optimized away).
  const onDevice = new Set(
    [...byProvider].flatMap(([provider, nodes]) => (provider === 'CPUExecutionProvider' ? [] : nodes.map((n) => n.name))),
  );
  const inputs = new Set((graph.input ?? []).map((i) => i.name!));
  const uploads: PlacedNode[] = [];
  for (const node of graph.node ?? []) {
    if (!onDevice.has(node.name!)) continue;
    const host = HOST_MEMORY_INPUTS[node.opType!] ?? [];
    (node.input ?? []).forEach((name, slot) => {
      if (inputs.has(name) && !host.includes(slot) && !uploads.some((u) => u.name === name)) uploads.push({ op: 'input', name });
    });
  }
  for (const node of optimizedGraph.node ?? [])
    if (node.opType === 'MemcpyFromHost') uploads.push({ op: node.opType, name: node.input![0]! });
  return { waits: deviceWaits(optimizedGraph), uploads };
}

/** The copies to the host and the Ifs of an optimized graph, branches included. */
function deviceWaits(graph: Graph, into: PlacedNode[] = []): PlacedNode[] {
  for (const node of graph.node ?? []) {
    if (node.opType === 'MemcpyToHost') into.push({ op: node.opType, name: node.input![0]! });
    if (node.opType === 'If') into.push({ op: node.opType, name: node.name! });
    for (const a of node.attribute ?? []) if (a.g) deviceWaits(a.g, into);
  }
  return into;
}

function lastError(text: string): string {
  const lines = text.split('\n').filter((l) => /\[E:|Error|error/.test(l));
  return (lines.at(-1) ?? text.split('\n').filter(Boolean).at(-1) ?? '').replace(/\x1b\[[0-9;]*m/g, '').slice(0, 500);
}
