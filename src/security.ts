// TLS and bearer-token authentication. Secrets come from files or the environment,
// never from the repository. Health checks stay open so orchestrators can probe.
import crypto from 'node:crypto';
import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { ConfigError } from './errors.js';

export interface TlsFiles {
  /** PEM server certificate chain and private key. */
  cert: string;
  key: string;
  /** PEM CA bundle: when given, clients must present a certificate it signed (mutual TLS). */
  clientCa?: string;
}

function readSecret(file: string, what: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (e) {
    throw new ConfigError(`${what}: cannot read ${file} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
}

export function serverCredentials(tls?: TlsFiles): grpc.ServerCredentials {
  if (!tls) return grpc.ServerCredentials.createInsecure();
  const cert = readSecret(tls.cert, 'tls-cert');
  const key = readSecret(tls.key, 'tls-key');
  const ca = tls.clientCa ? readSecret(tls.clientCa, 'tls-client-ca') : null;
  return grpc.ServerCredentials.createSsl(ca, [{ cert_chain: cert, private_key: key }], ca !== null);
}

/** Tokens from a file (one per line, so a rotation can list old and new) or a value. */
export function loadTokens(options: { file?: string; value?: string }): string[] {
  const text = options.file ? readSecret(options.file, 'auth-token-file').toString('utf8') : (options.value ?? '');
  const tokens = text
    .split(/\r?\n/)
    .map((t) => t.trim())
    .filter((t) => t.length > 0 && !t.startsWith('#'));
  if ((options.file || options.value) && tokens.length === 0) throw new ConfigError('auth token: the file or value holds no token');
  for (const t of tokens) if (t.length < 16) throw new ConfigError('auth token: use tokens of at least 16 characters');
  return tokens;
}

/** Whether an `Authorization` header carries one of `tokens` (SHA-256 digests compared
 * in constant time). */
export function tokenChecker(tokens: string[]): (header: string | undefined) => boolean {
  const digests = tokens.map((t) => crypto.createHash('sha256').update(t).digest());
  return (header) => {
    const m = /^Bearer\s+(\S+)$/i.exec(header ?? '');
    if (!m) return false;
    const digest = crypto.createHash('sha256').update(m[1]!).digest();
    return digests.some((d) => crypto.timingSafeEqual(d, digest));
  };
}
