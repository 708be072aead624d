// Request bodies as JSON, by the proto3 rule for text: a string that is not valid UTF-8 is
// refused, naming where it is — the same on every route and over gRPC (strict-utf8.ts).
// Fastify's own parser decoded invalid bytes to U+FFFD without a word (a client's corrupted
// text scored as something it never sent), the OpenAI routes took lone surrogate escapes
// (`"\ud800"`), and a key given twice silently kept its last value.
import { InvalidArgumentError } from '../common/errors.js';
import { invalidTextField } from '../api/strict-utf8.js';

const strict = new TextDecoder('utf-8', { fatal: true });

/** A request body parsed, or INVALID_ARGUMENT naming what is wrong with it: `where` is
 * the body, or one message of a body that streams them (an NDJSON line: `message 2`),
 * whose fields are then named under it (`message 2.item.context_text`). */
export function parseJsonBody(bytes: Buffer, where = 'body'): unknown {
  const within = (path: string) => (where === 'body' ? path : `${where}.${path}`);
  if (bytes.length === 0) throw new InvalidArgumentError(where, 'a JSON object is required');
  let text: string;
  try {
    text = strict.decode(bytes);
  } catch {
    throw new InvalidArgumentError(where, `is not valid UTF-8 (at byte ${firstInvalidByte(bytes)})`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new InvalidArgumentError(where, where === 'body' ? 'the request body is not JSON' : `is not JSON: ${(err as Error).message}`);
  }
  const key = badKey(text);
  if (key) throw new InvalidArgumentError(within(key.path), key.why);
  const field = invalidTextField(value);
  if (field) throw new InvalidArgumentError(within(field), 'is not valid UTF-8');
  return value;
}

/** The offset of the sequence where strict decoding fails (binary search over prefixes
 * that decode as a stream: only on a body already refused). */
function firstInvalidByte(bytes: Buffer): number {
  let lo = 0;
  let hi = bytes.length;
  // The longest prefix that decodes, allowing a sequence cut at its end.
  const decodes = (n: number) => {
    try {
      new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(0, n), { stream: true });
      return true;
    } catch {
      return false;
    }
  };
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (decodes(mid)) lo = mid;
    else hi = mid - 1;
  }
  // That prefix may end in the first bytes of the sequence that goes wrong: its lead byte.
  try {
    strict.decode(bytes.subarray(0, lo));
    return lo; // it ends on a whole character: the byte after it is wrong
  } catch {
    /* it ends inside the sequence that goes wrong */
  }
  let at = lo;
  while (at > 0 && at > lo - 3 && (bytes[at - 1]! & 0xc0) === 0x80) at--;
  return at > 0 && bytes[at - 1]! >= 0xc0 && at - 1 >= lo - 3 ? at - 1 : lo;
}

/** A key given twice in one object, or one that would poison a prototype (`__proto__`,
 * `constructor`: fastify's parser refused those), with where it is. The text is valid JSON. */
function badKey(text: string): { path: string; why: string } | undefined {
  // Per open container: its keys so far (objects) or null (arrays), and its path.
  const stack: { keys: Set<string> | null; path: string }[] = [];
  let expectKey = false;
  let lastKey = '';
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      let j = i + 1;
      while (text.charCodeAt(j) !== 0x22) j += text.charCodeAt(j) === 0x5c /* \ */ ? 2 : 1;
      const top = stack.at(-1);
      if (top?.keys && expectKey) {
        const key = JSON.parse(text.slice(i, j + 1)) as string;
        const path = top.path ? `${top.path}.${key}` : key;
        if (key === '__proto__' || key === 'constructor') return { path, why: 'is not a field (refused: it names a prototype)' };
        if (top.keys.has(key)) return { path, why: 'given twice in the JSON' };
        top.keys.add(key);
        lastKey = key;
        expectKey = false;
      }
      i = j;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      const top = stack.at(-1);
      const path = top === undefined ? '' : top.keys ? (top.path ? `${top.path}.${lastKey}` : lastKey) : `${top.path}[]`;
      stack.push({ keys: c === 0x7b ? new Set() : null, path });
      expectKey = c === 0x7b;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
    } else if (c === 0x2c /* , */) {
      expectKey = stack.at(-1)?.keys != null;
    }
  }
  return undefined;
}
