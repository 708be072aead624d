// A parsed config checked against what it describes, before anything is built from it:
// its special token ids against its vocabulary, and its dimensions against the tensor
// shapes the weight files' headers give (no tensor is read). A reader of another weight
// format gives the same name → shape map.
import { CheckpointError, shownValue } from '../common/errors.js';
import type { ModelConfig, RawConfig } from './family-spec.js';

/** bos/eos/pad token ids (a number or a list; null or absent: none) must lie in
 * [0, vocab): an id past it failed every empty-context score inside the graph's Gather. */
export function checkSpecialIds(raw: RawConfig, vocabKey: string, vocab: number): void {
  for (const key of ['bos_token_id', 'eos_token_id', 'pad_token_id']) {
    const v: unknown = raw[key];
    if (v === undefined || v === null) continue;
    const list = Array.isArray(v) ? v : [v];
    list.forEach((id, i) => {
      if (!Number.isSafeInteger(id) || id < 0 || id >= vocab)
        throw new CheckpointError(
          `config.json: ${key}${Array.isArray(v) ? `[${i}]` : ''} = ${shownValue(id)} is not a token id in [0, ${vocabKey} ${vocab})`,
        );
    });
  }
}

/** What a weight format tells of its tensors without reading them (`name`: how the file
 * names the tensor, when not as the key does). */
type TensorShapes = ReadonlyMap<string, { shape: readonly number[]; file: string; name?: string }>;

/** Refuse a config whose layer count or dimensions disagree with the checkpoint's
 * tensors, by arithmetic over the headers: tensors of layers past `num_hidden_layers`
 * (named), layers with no tensor, and the embedding, the first layer's attention and MLP
 * projections and the head against the config's sizes (the decoder checks every tensor
 * again as it reads it; these are the ones that size the rest, so a config that is wrong
 * is refused before a rotary table or graph is made for it). */
export function checkTensorsAgainstConfig(c: ModelConfig, tensors: TensorShapes, dir: string): void {
  checkLayerCount(c, tensors, dir);
  for (const [name, shape, keys] of anchorShapes(c)) {
    const stored = [name, ...(c.spec.alternativeNames?.(name) ?? [])].find((n) => tensors.has(n));
    if (stored === undefined) throw new CheckpointError(`${dir}: tensor ${name} is missing from the checkpoint`);
    const t = tensors.get(stored)!;
    if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i]))
      throw new CheckpointError(`${t.file}: tensor ${t.name ?? stored} has shape [${t.shape}], config says [${shape}] (${keys})`);
  }
}

/** The layer index of each tensor under the family's layer prefix (or an alternative
 * name of it), compared with the config's layer count. */
function checkLayerCount(c: ModelConfig, tensors: TensorShapes, dir: string): void {
  const mark = '\u0000';
  const template = c.spec.layerPrefix(mark as unknown as number);
  const prefixes = [template, ...(c.spec.alternativeNames?.(template) ?? [])].map((p) => p.split(mark) as [string, string]);
  const present = new Set<number>();
  const beyond: string[] = [];
  for (const name of tensors.keys()) {
    for (const [before, after] of prefixes) {
      if (!name.startsWith(before)) continue;
      const m = /^(\d+)/.exec(name.slice(before.length));
      if (!m || !name.slice(before.length + m[1]!.length).startsWith(after)) continue;
      const layer = Number(m[1]);
      if (layer >= c.numLayers) beyond.push(name);
      else present.add(layer);
      break;
    }
  }
  const key = c.spec.keys.layers;
  if (beyond.length > 0) {
    const shown = beyond.slice(0, 3).join(', ') + (beyond.length > 3 ? ` and ${beyond.length - 3} more` : '');
    throw new CheckpointError(`${dir}: the checkpoint holds tensors of layers past ${key} ${c.numLayers}: ${shown}`);
  }
  const missing = Array.from({ length: c.numLayers }, (_, l) => l).filter((l) => !present.has(l));
  if (missing.length > 0)
    throw new CheckpointError(
      `${dir}: ${key} is ${c.numLayers} but the checkpoint holds no tensor of layer${missing.length > 1 ? 's' : ''} ${missing.slice(0, 8).join(', ')}${missing.length > 8 ? ', …' : ''}`,
    );
}

/** The tensors that carry each dimension, as the decoder reads them: [name, shape, the
 * config keys behind the shape]. */
function anchorShapes(c: ModelConfig): [string, number[], string][] {
  const { spec } = c;
  const k = spec.keys;
  const [H, D, V, I] = [c.hiddenSize, c.headDim, c.vocabSize, c.intermediateSize];
  // torch.nn.Linear stores [out, in]; GPT-2's Conv1D [in, out].
  const linear = (out: number, inp: number) => (spec.linearLayout === 'out_in' ? [out, inp] : [inp, out]);
  const attnKeys = `${k.hidden}, ${k.heads}${k.kvHeads ? `, ${k.kvHeads}` : ''}, head_dim`;
  const out: [string, number[], string][] = [[spec.embed, [V, H], `${k.vocab}, ${k.hidden}`]];
  if (!c.tiedEmbeddings) out.push([spec.lmHead, [V, H], `${k.vocab}, ${k.hidden}`]);
  if (spec.positions.kind === 'learned') out.push([spec.positions.table, [c.maxPositions, H], `${k.maxPositions}, ${k.hidden}`]);
  const at = (l: number, name: string) => `${spec.layerPrefix(l)}${name}.weight`;
  const [q, kv] = [c.numHeads * D, c.numKvHeads * D];
  out.push([at(0, spec.o), linear(H, q), attnKeys]);
  if (spec.qkv.kind === 'separate') out.push([at(0, spec.qkv.q), linear(q, H), attnKeys], [at(0, spec.qkv.k), linear(kv, H), attnKeys]);
  else out.push([at(0, spec.qkv.qkv), linear(q + 2 * kv, H), attnKeys]);
  const mlpKeys = `${k.hidden}, ${k.intermediate}`;
  const m = spec.mlp;
  if (m.kind === 'gated') out.push([at(0, m.gate), linear(I, H), mlpKeys]);
  else if (m.kind === 'gatedFused') out.push([at(0, m.gateUp), linear(2 * I, H), mlpKeys]);
  else if (m.kind === 'plain') out.push([at(0, m.fc), linear(I, H), mlpKeys]);
  else {
    const moe = c.moe!;
    const sparse = moe.sparseLayers.indexOf(true);
    const dense = moe.sparseLayers.indexOf(false);
    if (sparse >= 0) {
      out.push([at(sparse, m.router), linear(moe.experts, H), `${k.hidden}, num_local_experts / num_experts`]);
      out.push([
        at(sparse, `${m.experts}.0.${m.expert.gate}`),
        linear(moe.expertIntermediate, H),
        `${k.hidden}, the experts' width: moe_intermediate_size / intermediate_size`,
      ]);
    }
    if (dense >= 0 && m.dense) out.push([at(dense, m.dense.gate), linear(I, H), mlpKeys]);
  }
  return out;
}
