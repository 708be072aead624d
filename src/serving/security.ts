// TLS and bearer-token authentication. Secrets come from files or the environment,
// never from the repository. Health checks stay open so orchestrators can probe.
import crypto from 'node:crypto';
import fs from 'node:fs';
import type https from 'node:https';
import tls from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { ConfigError } from '../common/errors.js';

export interface TlsFiles {
  /** PEM server certificate chain and private key. */
  cert: string;
  key: string;
  /** PEM CA bundle: when given, clients must present a certificate it signed (mutual TLS). */
  clientCa?: string;
}

function readSecret(file: string, what: string): Buffer {
  if (file === '') throw new ConfigError(`${what}: the file name is empty`);
  try {
    return fs.readFileSync(file);
  } catch (e) {
    throw new ConfigError(`${what}: cannot read ${file} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
}

/** The PEM contents of TLS files, read once and checked to form a working context (a key
 * that does not match its certificate, or a file that is not PEM, stops the start). */
export interface TlsMaterial {
  cert: Buffer;
  key: Buffer;
  clientCa?: Buffer;
}

export function loadTls(files: TlsFiles): TlsMaterial {
  const material = {
    cert: readSecret(files.cert, 'tls-cert'),
    key: readSecret(files.key, 'tls-key'),
    clientCa: files.clientCa !== undefined ? readSecret(files.clientCa, 'tls-client-ca') : undefined,
  };
  try {
    tls.createSecureContext({ cert: material.cert, key: material.key, ca: material.clientCa });
  } catch (e) {
    throw new ConfigError(`tls: ${files.cert} and ${files.key} do not make a TLS identity (${(e as Error).message})`);
  }
  return material;
}

export function serverCredentials(material?: TlsMaterial): grpc.ServerCredentials {
  if (!material) return grpc.ServerCredentials.createInsecure();
  const ca = material.clientCa ?? null;
  return grpc.ServerCredentials.createSsl(ca, [{ cert_chain: material.cert, private_key: material.key }], ca !== null);
}

/** Options of node's https servers for the same policy as gRPC: with a client CA, a
 * client without a certificate it signed is refused during the handshake. */
export function httpsOptions(material: TlsMaterial): https.ServerOptions {
  return {
    cert: material.cert,
    key: material.key,
    ...(material.clientCa ? { ca: material.clientCa, requestCert: true, rejectUnauthorized: true } : {}),
  };
}

/** The security settings as flags and environment give them. */
export interface SecuritySettings {
  tlsCert?: string;
  tlsKey?: string;
  tlsClientCa?: string;
  authTokenFile?: string;
  /** CTXPROBE_AUTH_TOKEN: a token value (e.g. from a Kubernetes secret). */
  authToken?: string;
}

/** Check the settings for contradictions and read the tokens: a partial TLS setting, or
 * bearer tokens given twice or set but empty, refuse to start instead of serving open. */
export function resolveSecurity(s: SecuritySettings): { tls?: TlsFiles; tokens: string[] } {
  if ((s.tlsCert === undefined) !== (s.tlsKey === undefined)) {
    throw new ConfigError('--tls-cert and --tls-key go together (CTXPROBE_TLS_CERT, CTXPROBE_TLS_KEY)');
  }
  if (s.tlsClientCa !== undefined && s.tlsCert === undefined) {
    throw new ConfigError('--tls-client-ca (CTXPROBE_TLS_CLIENT_CA) needs --tls-cert and --tls-key: mutual TLS is TLS first');
  }
  if (s.authTokenFile !== undefined && s.authToken !== undefined) {
    throw new ConfigError(
      'bearer tokens are given twice: use --auth-token-file (CTXPROBE_AUTH_TOKEN_FILE) or CTXPROBE_AUTH_TOKEN, not both',
    );
  }
  if (s.authToken !== undefined && s.authToken.trim() === '') {
    throw new ConfigError('CTXPROBE_AUTH_TOKEN is set but empty: refusing to serve without the authentication it asks for');
  }
  const tls = s.tlsCert !== undefined ? { cert: s.tlsCert, key: s.tlsKey!, clientCa: s.tlsClientCa } : undefined;
  return { tls, tokens: loadTokens({ file: s.authTokenFile, value: s.authToken }) };
}

/** Tokens from a file (one per line, so a rotation can list old and new) or a value. */
export function loadTokens(options: { file?: string; value?: string }): string[] {
  const text = options.file !== undefined ? readSecret(options.file, 'auth-token-file').toString('utf8') : (options.value ?? '');
  const tokens = text
    .split(/\r?\n/)
    .map((t) => t.trim())
    .filter((t) => t.length > 0 && !t.startsWith('#'));
  if ((options.file !== undefined || options.value) && tokens.length === 0)
    throw new ConfigError('auth token: the file or value holds no token');
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
