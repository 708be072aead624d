// JSON text for OpenAI-style answers, where key order is part of what clients read.

/** An object whose keys keep their order in the JSON (a plain object would move
 * integer-like keys such as "1" to the front). */
export class OrderedObject {
  constructor(readonly entries: [string, number][]) {}
}

/** JSON text, keeping the key order of OrderedObject values. */
export function toJson(v: unknown): string {
  if (v instanceof OrderedObject) return `{${v.entries.map(([k, x]) => `${JSON.stringify(k)}:${JSON.stringify(x) ?? 'null'}`).join(',')}}`;
  if (Array.isArray(v)) return `[${v.map(toJson).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    const fields = Object.entries(v).filter(([, x]) => x !== undefined);
    return `{${fields.map(([k, x]) => `${JSON.stringify(k)}:${toJson(x)}`).join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}
