// Protobuf `string` fields must hold valid UTF-8; protobufjs decodes invalid bytes to
// U+FFFD without a word, so a client's corrupted text would be scored as something it
// never sent. Decoding strictly instead, an invalid string becomes a lone surrogate
// (which no valid UTF-8 decodes to), and `invalidTextField` finds it to refuse the call
// with the field named.
import protobuf from 'protobufjs';

const strict = new TextDecoder('utf-8', { fatal: true });
const MARK = '\uD800';

function decode(bytes: Uint8Array): string {
  try {
    return strict.decode(bytes);
  } catch {
    return MARK;
  }
}

type Readers = { prototype: { string(this: { uint32(): number; pos: number; len: number; buf: Uint8Array }): string } };
let installed = false;

/** Make protobufjs's readers (the one @grpc/proto-loader decodes with) strict. */
export function installStrictUtf8(): void {
  if (installed) return;
  installed = true;
  for (const Reader of [protobuf.Reader, protobuf.BufferReader] as unknown as Readers[]) {
    Reader.prototype.string = function () {
      const len = this.uint32();
      const start = this.pos;
      this.pos = Math.min(start + len, this.len);
      return decode(this.buf.subarray(start, this.pos));
    };
  }
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** The proto path (snake_case, as in the .proto) of the first string in a decoded
 * message that was not valid UTF-8, if any. */
export function invalidTextField(value: unknown, at = ''): string | undefined {
  if (typeof value === 'string') return LONE_SURROGATE.test(value) ? at || 'request' : undefined;
  if (Array.isArray(value)) {
    for (const [i, v] of value.entries()) {
      const found = invalidTextField(v, `${at}[${i}]`);
      if (found) return found;
    }
  } else if (value !== null && typeof value === 'object' && !Buffer.isBuffer(value)) {
    for (const [k, v] of Object.entries(value)) {
      const found = invalidTextField(v, `${at ? `${at}.` : ''}${k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)}`);
      if (found) return found;
    }
  }
  return undefined;
}
