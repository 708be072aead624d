// Test certificates made with openssl: a CA, a server certificate for localhost /
// 127.0.0.1, a client certificate, and an unrelated CA.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/** A CA, a server certificate for localhost / 127.0.0.1, a client certificate, and an unrelated CA. */
export function makeCertificates(dir: string) {
  const run = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const key = (name: string) => run('genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-out', `${name}.key`);
  for (const ca of ['ca', 'other-ca']) {
    key(ca);
    run('req', '-x509', '-new', '-key', `${ca}.key`, '-out', `${ca}.pem`, '-days', '2', '-subj', `/CN=${ca}`);
  }
  fs.writeFileSync(path.join(dir, 'server.ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  for (const [name, ext] of [
    ['server', ['-extfile', 'server.ext']],
    ['client', []],
  ] as const) {
    key(name);
    run('req', '-new', '-key', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
    run(
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      `${name}.pem`,
      '-days',
      '2',
      ...ext,
    );
  }
  const f = (n: string) => path.join(dir, n);
  return {
    ca: f('ca.pem'),
    otherCa: f('other-ca.pem'),
    // A self-signed identity the test CA never signed: a client certificate to refuse.
    otherCaCert: f('other-ca.pem'),
    otherCaKey: f('other-ca.key'),
    serverCert: f('server.pem'),
    serverKey: f('server.key'),
    clientCert: f('client.pem'),
    clientKey: f('client.key'),
  };
}
