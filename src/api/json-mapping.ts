// Protobuf's JSON mapping (https://protobuf.dev/programming-guides/json/) over the API's
// own descriptors, for the HTTP/JSON transcoder and the OpenAPI document:
//   parse:  JSON → a message object protobufjs encodes — fields by lowerCamelCase or proto
//           name, enums by name or number, 64-bit integers as strings or numbers, floats
//           also as "NaN" / "Infinity", bytes base64, wrappers as bare values, null as
//           unset; unknown fields, a field given twice and two members of one oneof are
//           refused with the field's path named (proto names, as every error names them).
//   format: a decoded message → JSON — lowerCamelCase names, enums by name, 64-bit
//           integers as strings, float as its shortest float32 digits, non-finite numbers
//           as strings; scalars and lists always (defaults included, so a client never
//           guesses at a missing 0), message fields and oneof members only when set.
// protobufjs's own toObject/fromObject coerce silently and keep unknown keys: a request
// scored with a misspelt field quietly at its default is the failure this exists to stop.
import path from 'node:path';
import protobuf from 'protobufjs';
import { createRequire } from 'node:module';
import { InvalidArgumentError } from '../common/errors.js';
import { PROTO_DIR, PROTO_FILE } from './proto.js';

const require = createRequire(import.meta.url);

let root: protobuf.Root | undefined;

/** The API's descriptors with the proto's own (snake_case) field names. */
export function apiRoot(): protobuf.Root {
  if (root) return root;
  // descriptor.proto comes with protobufjs (as @grpc/proto-loader also registers it).
  protobuf.common('descriptor', require('protobufjs/google/protobuf/descriptor.json').nested.google.nested.protobuf.nested);
  const r = new protobuf.Root();
  r.resolvePath = (_origin, target) => (target.startsWith('google/protobuf/') ? target : path.join(PROTO_DIR, target));
  // alternateCommentMode: the proto's `//` comments become descriptions (OpenAPI).
  r.loadSync(PROTO_FILE, { keepCase: true, alternateCommentMode: true });
  r.resolveAll();
  return (root = r);
}

/** The JSON name of a proto field: lowerCamelCase, as protoc derives it. */
export const jsonName = (name: string) => name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());

/** A message's field by the name a JSON key gives it: its proto name or its JSON name. */
export const fieldNamed = (type: protobuf.Type, key: string): protobuf.Field | undefined =>
  type.fields[key] ?? type.fieldsArray.find((x) => jsonName(x.name) === key);

/** google.protobuf's wrappers: a bare value in JSON. */
export const WRAPPERS = new Set(
  ['Double', 'Float', 'Int64', 'UInt64', 'Int32', 'UInt32', 'Bool', 'String', 'Bytes'].map((k) => `google.protobuf.${k}Value`),
);
const fullName = (t: protobuf.Type) => t.fullName.replace(/^\./, '');

const INT_RANGE: Record<string, [number, number]> = {
  int32: [-(2 ** 31), 2 ** 31 - 1],
  sint32: [-(2 ** 31), 2 ** 31 - 1],
  sfixed32: [-(2 ** 31), 2 ** 31 - 1],
  uint32: [0, 2 ** 32 - 1],
  fixed32: [0, 2 ** 32 - 1],
};
const LONGS = new Set(['int64', 'sint64', 'sfixed64', 'uint64', 'fixed64']);
const UNSIGNED = new Set(['uint64', 'fixed64']);
const BASE64 = /^(?:[A-Za-z0-9+/\-_]{4})*(?:[A-Za-z0-9+/\-_]{2}(?:==)?|[A-Za-z0-9+/\-_]{3}=?)?$/;

const at = (base: string, key: string) => (base ? `${base}.${key}` : key);
const what = (v: unknown) =>
  v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v === 'object' ? 'an object' : `${typeof v} ${JSON.stringify(v)}`;

/** A JSON request body as the plain object `type.fromObject` takes. */
export function parseMessage(type: protobuf.Type, value: unknown, field = ''): Record<string, unknown> {
  if (WRAPPERS.has(fullName(type))) return { value: parseSingle(type.fields.value!, value, field) };
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new InvalidArgumentError(field || 'body', `expected an object (${type.name}), got ${what(value)}`);
  }
  const out: Record<string, unknown> = {};
  const given = new Map<string, string>();
  const oneofs = new Map<string, string>();
  for (const [key, v] of Object.entries(value)) {
    const f = fieldNamed(type, key);
    if (!f) throw new InvalidArgumentError(at(field, key), `unknown field: ${type.name} has no field ${JSON.stringify(key)}`);
    const where = at(field, f.name);
    if (given.has(f.name)) throw new InvalidArgumentError(where, `given twice (as ${given.get(f.name)} and ${key})`);
    given.set(f.name, key);
    if (v === null) continue; // null is the field's default, or unset
    const oneof = f.partOf?.name;
    if (oneof) {
      if (oneofs.has(oneof))
        throw new InvalidArgumentError(at(field, oneof), `set one of its fields, not ${oneofs.get(oneof)} and ${f.name}`);
      oneofs.set(oneof, f.name);
    }
    if (f.map) {
      if (typeof v !== 'object' || Array.isArray(v)) throw new InvalidArgumentError(where, `expected an object, got ${what(v)}`);
      out[f.name] = Object.fromEntries(Object.entries(v).map(([k, x]) => [k, parseSingle(f, x, `${where}[${JSON.stringify(k)}]`)]));
    } else if (f.repeated) {
      if (!Array.isArray(v)) throw new InvalidArgumentError(where, `expected an array, got ${what(v)}`);
      out[f.name] = v.map((x, i) => parseSingle(f, x, `${where}[${i}]`));
    } else {
      out[f.name] = parseSingle(f, v, where);
    }
  }
  return out;
}

function parseSingle(f: protobuf.Field, v: unknown, where: string): unknown {
  const resolved = f.resolvedType;
  if (resolved instanceof protobuf.Type) return parseMessage(resolved, v, where);
  if (resolved instanceof protobuf.Enum) {
    if (typeof v === 'string' && v in resolved.values) return v;
    if (typeof v === 'number' && Number.isInteger(v) && v in resolved.valuesById) return v;
    throw new InvalidArgumentError(where, `expected one of ${Object.keys(resolved.values).join(', ')}, got ${what(v)}`);
  }
  switch (f.type) {
    case 'string':
      if (typeof v === 'string') return v;
      break;
    case 'bool':
      if (typeof v === 'boolean') return v;
      break;
    case 'bytes':
      if (typeof v === 'string' && BASE64.test(v)) return Buffer.from(v, 'base64');
      throw new InvalidArgumentError(where, `expected base64 text, got ${what(v)}`);
    case 'double':
    case 'float': {
      const x =
        typeof v === 'number'
          ? v
          : typeof v === 'string' && /^(NaN|-?Infinity|-?\d+(\.\d*)?([eE][+-]?\d+)?|-?\.\d+([eE][+-]?\d+)?)$/.test(v)
            ? Number(v)
            : undefined;
      if (x !== undefined) return x;
      break;
    }
    default: {
      const text = typeof v === 'number' ? (Number.isSafeInteger(v) ? String(v) : '') : typeof v === 'string' ? v : '';
      if (!/^-?\d+$/.test(text)) break;
      if (LONGS.has(f.type)) {
        const n = BigInt(text);
        const ok = UNSIGNED.has(f.type) ? n >= 0n && n < 2n ** 64n : n >= -(2n ** 63n) && n < 2n ** 63n;
        if (!ok) throw new InvalidArgumentError(where, `${text} is out of range for ${f.type}`);
        return text;
      }
      const n = Number(text);
      const [lo, hi] = INT_RANGE[f.type]!;
      if (n < lo || n > hi) throw new InvalidArgumentError(where, `${text} is out of range for ${f.type}`);
      return n;
    }
  }
  throw new InvalidArgumentError(where, `expected ${LONGS.has(f.type) ? 'an integer (number or decimal string)' : f.type}, got ${what(v)}`);
}

/** How a message type's fields are written: each field's JSON name and kind, worked out
 * once per type (a large answer formats hundreds of thousands of messages: an alternative
 * of top-k is one). */
interface FieldPlan {
  field: protobuf.Field;
  name: string;
  kind: 'map' | 'repeated' | 'optional' | 'scalar';
  format: (v: unknown) => unknown;
}
const plans = new Map<protobuf.Type, FieldPlan[]>();

function planOf(type: protobuf.Type): FieldPlan[] {
  let plan = plans.get(type);
  if (!plan) {
    plan = type.fieldsArray.map((f) => ({
      field: f,
      name: jsonName(f.name),
      kind: f.map ? 'map' : f.repeated ? 'repeated' : f.partOf || f.resolvedType instanceof protobuf.Type ? 'optional' : 'scalar',
      format: singleFormatter(f),
    }));
    plans.set(type, plan);
  }
  return plan;
}

/** A decoded message (protobufjs, proto names) as its JSON value. */
export function formatMessage(type: protobuf.Type, msg: protobuf.Message | Record<string, unknown>): unknown {
  const m = msg as Record<string, unknown>;
  if (WRAPPERS.has(fullName(type))) return formatSingle(type.fields.value!, m.value);
  const out: Record<string, unknown> = {};
  for (const p of planOf(type)) {
    const v = m[p.field.name];
    switch (p.kind) {
      case 'map':
        out[p.name] = Object.fromEntries(Object.entries((v as object | undefined) ?? {}).map(([k, x]) => [k, p.format(x)]));
        break;
      case 'repeated':
        out[p.name] = ((v as unknown[] | undefined) ?? []).map(p.format);
        break;
      case 'optional':
        if (Object.prototype.hasOwnProperty.call(m, p.field.name) && v !== null && v !== undefined) out[p.name] = p.format(v);
        break;
      case 'scalar':
        out[p.name] = p.format(v ?? p.field.typeDefault);
    }
  }
  return out;
}

function formatSingle(f: protobuf.Field, v: unknown): unknown {
  return singleFormatter(f)(v);
}

/** How one value of field `f` is written. */
function singleFormatter(f: protobuf.Field): (v: unknown) => unknown {
  const resolved = f.resolvedType;
  if (resolved instanceof protobuf.Type) return (v) => formatMessage(resolved, v as Record<string, unknown>);
  if (resolved instanceof protobuf.Enum) return (v) => resolved.valuesById[v as number] ?? v;
  if (LONGS.has(f.type)) return (v) => String(v); // Long and number both print their digits
  switch (f.type) {
    case 'bytes':
      return (v) => Buffer.from(v as Uint8Array).toString('base64');
    case 'float':
      return (v) => finite(v as number) ?? shortestFloat32(v as number);
    case 'double':
      return (v) => finite(v as number) ?? v;
    default:
      return (v) => v;
  }
}

const finite = (x: number) => (Number.isNaN(x) ? 'NaN' : x === Infinity ? 'Infinity' : x === -Infinity ? '-Infinity' : undefined);

/** The fewest decimal digits that read back as the same float32 (0.1, not
 * 0.10000000149011612): what a float field holds, as protobuf's own JSON printers write it.
 * The nearest d-digit decimal is never farther than the nearest (d−1)-digit one, and the
 * decimals that read back as x are an interval around it: so digits that read back stay so
 * with more, and the search starts at 6 (where most float32 log-probs need 6–9), going
 * down while they still do, else up (a third of the time of counting up from 1). */
export function shortestFloat32(x: number): number {
  let y = Number(x.toPrecision(6));
  if (Math.fround(y) === x) {
    for (let digits = 5; digits >= 1; digits--) {
      const z = Number(x.toPrecision(digits));
      if (Math.fround(z) !== x) break;
      y = z;
    }
    return y;
  }
  for (let digits = 7; digits < 9; digits++) {
    y = Number(x.toPrecision(digits));
    if (Math.fround(y) === x) return y;
  }
  return Number(x.toPrecision(9));
}
