import { X509Certificate, webcrypto } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The development CA of a non-production service: a CA certificate that the webhook deliverer
 * trusts, and one certificate it signed for the local machine (localhost, 127.0.0.1, ::1) that a
 * local HTTPS receiver (`msvc listen`) serves. The CA's private key is never written: it signs
 * the one local certificate and is dropped, so the files under DATA_DIR cannot mint a certificate
 * for any other name.
 */
export interface DevCaFiles {
  dir: string;
  /** The CA certificate (PEM) the deliverer adds to its trusted roots. */
  caFile: string;
  /** The local certificate (PEM) and its private key (PKCS#8 PEM, mode 0600). */
  certFile: string;
  keyFile: string;
}

const VALID_DAYS = 365;
/** A local certificate this close to its end is replaced (with a new CA) at the next start. */
const RENEW_BEFORE_MS = 7 * 24 * 3600 * 1000;
const EC = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

export function devCaFiles(dataDir: string): DevCaFiles {
  const dir = join(dataDir, 'dev-ca');
  return { dir, caFile: join(dir, 'ca.pem'), certFile: join(dir, 'localhost.pem'), keyFile: join(dir, 'localhost-key.pem') };
}

function usable(files: DevCaFiles, nowMs: number): boolean {
  if (![files.caFile, files.certFile, files.keyFile].every((f) => existsSync(f))) return false;
  try {
    const ca = new X509Certificate(readFileSync(files.caFile));
    const cert = new X509Certificate(readFileSync(files.certFile));
    return cert.verify(ca.publicKey) && Date.parse(cert.validTo) - nowMs > RENEW_BEFORE_MS;
  } catch {
    return false;
  }
}

/** The development CA under `dataDir`, made when missing, unreadable or near its end. */
export async function ensureDevCa(dataDir: string, nowMs = Date.now()): Promise<DevCaFiles> {
  const files = devCaFiles(dataDir);
  if (usable(files, nowMs)) return files;
  // Written into a directory of its own and renamed into place, so a process starting beside this
  // one (an api and a worker on one DATA_DIR) never reads a CA and a certificate of different sets.
  const staging = `${files.dir}.${process.pid}.tmp`;
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging, { recursive: true });
  const pem = await issue(nowMs);
  writeFileSync(join(staging, 'ca.pem'), pem.ca);
  writeFileSync(join(staging, 'localhost.pem'), pem.cert);
  writeFileSync(join(staging, 'localhost-key.pem'), pem.key, { mode: 0o600 });
  chmodSync(join(staging, 'localhost-key.pem'), 0o600);
  rmSync(files.dir, { recursive: true, force: true });
  try {
    renameSync(staging, files.dir);
  } catch (err) {
    // Another process put its own set in place first: that one is as good.
    rmSync(staging, { recursive: true, force: true });
    if (!usable(files, nowMs)) throw err;
  }
  return files;
}

async function issue(nowMs: number): Promise<{ ca: string; cert: string; key: string }> {
  // Loaded only when a CA is made (once per DATA_DIR), not at every start. @peculiar/x509 needs the
  // Reflect metadata API (its dependency injection), which reflect-metadata adds.
  await import('reflect-metadata');
  const x509 = await import('@peculiar/x509');
  const crypto = webcrypto;
  // The library's parameter type is the DOM's Crypto, which Node's webcrypto implements.
  const provider = webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0];
  x509.cryptoProvider.set(provider);
  const notBefore = new Date(nowMs - 60_000);
  const notAfter = new Date(nowMs + VALID_DAYS * 24 * 3600 * 1000);
  const serial = () => Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString('hex').replace(/^[89a-f]/, '1');

  const caKeys = await crypto.subtle.generateKey(EC, false, ['sign', 'verify']);
  const ca = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(), name: `CN=msvc development CA ${new Date(nowMs).toISOString().slice(0, 10)}`, notBefore, notAfter,
    keys: caKeys, signingAlgorithm: EC,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(caKeys.publicKey),
    ],
  }, provider);

  const keys = await crypto.subtle.generateKey(EC, true, ['sign', 'verify']);
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial(), subject: 'CN=localhost', issuer: ca.subject, notBefore, notAfter,
    signingKey: caKeys.privateKey, publicKey: keys.publicKey, signingAlgorithm: EC,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension([
        { type: 'dns', value: 'localhost' }, { type: 'ip', value: '127.0.0.1' }, { type: 'ip', value: '::1' },
      ]),
      await x509.AuthorityKeyIdentifierExtension.create(ca, false, provider),
    ],
  }, provider);
  const pkcs8 = await crypto.subtle.exportKey('pkcs8', keys.privateKey);
  return { ca: ca.toString('pem'), cert: cert.toString('pem'), key: x509.PemConverter.encode(pkcs8, 'PRIVATE KEY') };
}
