// No silent CPU fallback on CUDA, checked statically (no GPU is lent to this project): every
// node of the scoring and probe graphs, built as they are for CUDA (float16 and bfloat16),
// must match a kernel in onnxruntime's table of CUDA execution-provider kernels — its op,
// domain, opset range and the element type bound to each input and output. A node without
// one would run on the CPU, with a device copy either side, and nothing would say so.
//
// The table is test/data/onnxruntime-cuda-kernels.md (source and caveats in its header).
// The element types are propagated through the graph here, from its inputs and
// initializers, by each op's ONNX output-type rule (the ops we emit, listed below).
import fs from 'node:fs';
import onnxProto from 'onnx-proto';
import { describe, expect, it } from 'vitest';
import { SafetensorsCheckpoint } from '../src/checkpoint/safetensors.js';
import { readModelConfig } from '../src/model/config.js';
import { buildDecoderGraph } from '../src/model/decoder.js';
import { probeTap } from '../kernels/probe-tap.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { inferTypes, type Graph } from '../src/graph/types.js';

const { onnx } = onnxProto;
type Node = onnxProto.onnx.INodeProto;
type Model = onnxProto.onnx.IModelProto;

const TABLE = new URL('./data/onnxruntime-cuda-kernels.md', import.meta.url);

// ---------------------------------------------------------------------------------------
// The table: one row per (domain, op) — its opset range, its signatures (each input and
// output bound to a constraint letter or a literal type) and the types each letter allows.
interface Param {
  constraint: string;
  variadic: boolean;
}
interface KernelRow {
  domain: string;
  op: string;
  since: number;
  until: number;
  signatures: { inputs: Param[]; outputs: Param[] }[];
  allowed: Map<string, Set<string>>;
}

export function parseKernelTable(text: string): KernelRow[] {
  const rows: KernelRow[] = [];
  let domain = '';
  for (const line of text.split('\n')) {
    const domainMatch = /^\|\*\*Operator Domain:\*\* \*([^*]+)\*/.exec(line);
    if (domainMatch) {
      domain = domainMatch[1]!;
      continue;
    }
    const cells = line.split('|').slice(1, -1);
    if (cells.length !== 4 || !cells[0] || cells[0].includes('Op Name') || cells[0].startsWith('-')) continue;
    const [op, parameters, versions, types] = cells as [string, string, string, string];
    const range = /^\[(\d+), (\d+)\]$/.exec(versions) ?? /^(\d+)\+$/.exec(versions) ?? /^(\d+)$/.exec(versions);
    if (!range) throw new Error(`${op}: opset cell ${JSON.stringify(versions)}`);
    const since = Number(range[1]);
    const until = versions.endsWith('+') ? Infinity : Number(range[2] ?? range[1]);
    const signatures = parameters.split('<br><br>or<br><br>').map((variant) => {
      const inputs: Param[] = [];
      const outputs: Param[] = [];
      for (const m of variant.matchAll(/\*(in|out)\* ([\w.]+):\*\*([^*]+)\*\*/g)) {
        (m[1] === 'in' ? inputs : outputs).push({ constraint: m[3]!, variadic: m[2]!.endsWith('...') });
      }
      return { inputs, outputs };
    });
    const allowed = new Map<string, Set<string>>();
    for (const part of types.split('<br/>')) {
      const m = /\*\*([^*]+)\*\* = (.*)$/.exec(part.trim());
      if (m) allowed.set(m[1]!, new Set([...m[2]!.matchAll(/(?<!seq\()tensor\((\w+)\)/g)].map((t) => t[1]!)));
    }
    rows.push({ domain, op, since, until, signatures, allowed });
  }
  return rows;
}

// ---------------------------------------------------------------------------------------
// One node against the table: the reason it has no CUDA kernel, or undefined.
// Lists the table writes without "..." (ONNX's variadic parameters).
const VARIADIC = new Set(['Concat input', 'Max input', 'Split output', 'If output']);
function missingKernel(node: Node, opsets: Map<string, number>, rows: KernelRow[], types: Map<string, string>): string | undefined {
  const domain = node.domain || 'ai.onnx';
  const opset = opsets.get(domain)!;
  const row = rows.find((r) => r.domain === domain && r.op === node.opType && r.since <= opset && opset <= r.until);
  if (!row) return `no CUDA kernel for ${domain} ${node.opType} at opset ${opset}`;
  const ins = (node.input ?? []).map((n) => (n === '' ? undefined : types.get(n)));
  const outs = (node.output ?? []).map((n) => types.get(n));
  const reasons: string[] = [];
  for (const sig of row.signatures) {
    const bound = new Map<string, string>();
    const bind = (params: Param[], actual: (string | undefined)[], side: string): string | undefined => {
      const variadic = params.at(-1)?.variadic || VARIADIC.has(`${node.opType} ${side}`);
      if (actual.length > params.length && !variadic) return `${actual.length} ${side}s, the signature has ${params.length}`;
      for (const [i, type] of actual.entries()) {
        if (type === undefined) continue; // an optional input left out
        const param = params[Math.min(i, params.length - 1)]!;
        const literal = /^tensor\((\w+)\)$/.exec(param.constraint);
        if (literal) {
          if (literal[1] !== type) return `${side} ${i} is ${type}, the kernel takes ${literal[1]}`;
          continue;
        }
        const allowed = row.allowed.get(param.constraint);
        if (!allowed) return `constraint ${param.constraint} has no types in this row`;
        if (!allowed.has(type)) return `${side} ${i} (${param.constraint}) is ${type}; CUDA has ${[...allowed].join(', ')}`;
        const prior = bound.get(param.constraint);
        if (prior && prior !== type) return `${param.constraint} bound to ${prior} and ${type}`;
        bound.set(param.constraint, type);
      }
      return undefined;
    };
    const why = bind(sig.inputs, ins, 'input') ?? bind(sig.outputs, outs, 'output');
    if (!why) return undefined;
    reasons.push(why);
  }
  return `${domain} ${node.opType} (opset ${opset}): ${reasons.join('; or ')}`;
}

function graphFailures(model: Model, rows: KernelRow[]): string[] {
  const opsets = new Map((model.opsetImport ?? []).map((o) => [o.domain || 'ai.onnx', Number(o.version)]));
  const failures: string[] = [];
  // Every node, including those of If branches (which see their enclosing graph's values).
  const check = (graph: Graph, outer?: Map<string, string>) => {
    const types = inferTypes(graph, outer);
    for (const node of graph.node ?? []) {
      const why = missingKernel(node, opsets, rows, types);
      if (why) failures.push(`${node.name}: ${why}`);
      for (const a of node.attribute ?? []) if (a.g) check(a.g, types);
    }
  };
  check(model.graph!);
  return failures;
}

const rows = parseKernelTable(fs.readFileSync(TABLE, 'utf8'));

describe('the CUDA kernel table (test data)', () => {
  it('parses: opset ranges, signatures with alternatives, and type lists', () => {
    const add = rows.find((r) => r.op === 'Add')!;
    expect([add.domain, add.since, add.until]).toEqual(['ai.onnx', 14, Infinity]);
    expect(add.signatures).toEqual([{ inputs: [{ constraint: 'T', variadic: false }, { constraint: 'T', variadic: false }], outputs: [{ constraint: 'T', variadic: false }] }]);
    expect(add.allowed.get('T')!.has('bfloat16')).toBe(true);
    const cast = rows.find((r) => r.op === 'Cast')!;
    expect([cast.since, cast.until]).toEqual([21, 22]);
    const topK = rows.find((r) => r.op === 'TopK')!;
    expect(topK.signatures.map((s) => s.inputs.length)).toEqual([2, 1]);
    expect(topK.signatures[0]!.inputs[1]!.constraint).toBe('tensor(int64)');
    // seq(…) types are not tensor types.
    expect(rows.find((r) => r.op === 'Identity')!.allowed.get('V')!.has('bfloat16')).toBe(true);
    expect(rows.find((r) => r.op === 'FusedMatMul')!.domain).toBe('com.microsoft');
  });

  it('catches what it is for: a bfloat16 TopK and a float16 Range have no CUDA kernel', () => {
    // A graph built by hand, so the check is seen to fail where CUDA has no kernel.
    const value = (name: string, elemType: number) => ({ name, type: { tensorType: { elemType } } });
    const model = onnx.ModelProto.create({
      opsetImport: [{ domain: '', version: 21 }],
      graph: {
        input: [value('x', 16), value('k', 7), value('h', 10)],
        node: [
          { name: '/topk', opType: 'TopK', input: ['x', 'k'], output: ['v', 'i'] },
          { name: '/softmax', opType: 'Softmax', input: ['x'], output: ['s'] },
          { name: '/range', opType: 'Range', input: ['h', 'h', 'h'], output: ['r'] },
          { name: '/cast', opType: 'Cast', input: ['x'], output: ['f'], attribute: [{ name: 'to', type: 2, i: 1 }] },
          { name: '/topk_f', opType: 'TopK', input: ['f', 'k'], output: ['v2', 'i2'] },
        ],
      },
    });
    const failures = graphFailures(model, rows);
    expect(failures).toHaveLength(2);
    expect(failures[0]).toMatch(/^\/topk: .*input 0 \(T\) is bfloat16/);
    expect(failures[1]).toMatch(/^\/range: .*float16/);
  });
});

// Every op the graphs emit, so a new op is looked up in the table (add its row) rather than
// passing because no fixture exercised it.
const EMITTED = new Set<string>();

describe.each(Object.keys(FAMILY_FIXTURES))('%s graphs on CUDA', (family) => {
  const fx = makeFixture(FAMILY_FIXTURES[family]!);
  const config = readModelConfig(fx.dir);
  const ckpt = new SafetensorsCheckpoint(fx.dir);
  it.each([
    ['float16', 'scoring'],
    ['float16', 'probe'],
    ['bfloat16', 'scoring'],
    ['bfloat16', 'probe'],
  ] as const)('%s %s graph: every node has a CUDA kernel for its types', (dtype, kind) => {
    const model = onnx.ModelProto.decode(buildDecoderGraph(config, ckpt, dtype, kind === 'probe' ? probeTap() : undefined, 'cuda').model);
    const collect = (graph: Graph) =>
      graph.node!.forEach((n) => {
        EMITTED.add(`${n.domain || 'ai.onnx'} ${n.opType}`);
        for (const a of n.attribute ?? []) if (a.g) collect(a.g);
      });
    collect(model.graph!);
    expect(graphFailures(model, rows)).toEqual([]);
  });
});

describe('coverage', () => {
  it('every op the graphs emit has a row in the table', () => {
    expect(EMITTED.size).toBeGreaterThan(40);
    const listed = new Set(rows.map((r) => `${r.domain} ${r.op}`));
    expect([...EMITTED].filter((op) => !listed.has(op))).toEqual([]);
  });
});
