import { createHash, generateKeyPairSync, randomBytes, sign, X509Certificate, type KeyObject } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as der from './der.ts';

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
  const issued = issue(nowMs);
  writeFileSync(join(staging, 'ca.pem'), issued.ca);
  writeFileSync(join(staging, 'localhost.pem'), issued.cert);
  writeFileSync(join(staging, 'localhost-key.pem'), issued.key, { mode: 0o600 });
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

const OID = {
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
  commonName: '2.5.4.3',
  basicConstraints: '2.5.29.19',
  keyUsage: '2.5.29.15',
  extKeyUsage: '2.5.29.37',
  serverAuth: '1.3.6.1.5.5.7.3.1',
  subjectKeyIdentifier: '2.5.29.14',
  authorityKeyIdentifier: '2.5.29.35',
  subjectAltName: '2.5.29.17',
};
/** KeyUsage's named bits (RFC 5280 4.2.1.3), as the first byte of the BIT STRING and how many bits count. */
const KEY_USAGE = { digitalSignature: [0x80, 1], certSigning: [0x04 | 0x02, 7] } as const; // keyCertSign, cRLSign

/**
 * The two certificates, encoded here (der.ts) and signed with node:crypto: an X.509 library took
 * 0.15 s of CPU at a first start to load, and 0.6 MB of the bundle that every start reads.
 */
function issue(nowMs: number): { ca: string; cert: string; key: string } {
  const notBefore = new Date(nowMs - 60_000);
  const notAfter = new Date(nowMs + VALID_DAYS * 24 * 3600 * 1000);
  const caKeys = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const caName = name(`msvc development CA ${new Date(nowMs).toISOString().slice(0, 10)}`);
  const caKeyId = keyIdentifier(caKeys.publicKey);
  const ca = certificate({
    issuer: caName, subject: caName, notBefore, notAfter, publicKey: caKeys.publicKey, signingKey: caKeys.privateKey,
    extensions: [
      extension(OID.basicConstraints, true, der.sequence(der.boolean(true), der.smallInteger(0))),
      extension(OID.keyUsage, true, der.bitString(Buffer.from([KEY_USAGE.certSigning[0]]), KEY_USAGE.certSigning[1])),
      extension(OID.subjectKeyIdentifier, false, der.octetString(caKeyId)),
    ],
  });

  const keys = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const cert = certificate({
    issuer: caName, subject: name('localhost'), notBefore, notAfter, publicKey: keys.publicKey, signingKey: caKeys.privateKey,
    extensions: [
      extension(OID.basicConstraints, true, der.sequence()),
      extension(OID.keyUsage, true, der.bitString(Buffer.from([KEY_USAGE.digitalSignature[0]]), KEY_USAGE.digitalSignature[1])),
      extension(OID.extKeyUsage, false, der.sequence(der.objectIdentifier(OID.serverAuth))),
      extension(OID.subjectAltName, false, der.sequence(
        der.implicit(2, Buffer.from('localhost', 'ascii')), // dNSName
        der.implicit(7, Buffer.from([127, 0, 0, 1])), // iPAddress
        der.implicit(7, Buffer.from('00000000000000000000000000000001', 'hex')),
      )),
      extension(OID.authorityKeyIdentifier, false, der.sequence(der.implicit(0, caKeyId))),
    ],
  });
  return { ca: pem('CERTIFICATE', ca), cert: pem('CERTIFICATE', cert), key: keys.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString() };
}

interface CertificateFields {
  issuer: Buffer;
  subject: Buffer;
  notBefore: Date;
  notAfter: Date;
  publicKey: KeyObject;
  signingKey: KeyObject;
  extensions: Buffer[];
}

/** An X.509 v3 certificate (RFC 5280 4.1), signed with ECDSA over SHA-256, in DER. */
function certificate(fields: CertificateFields): Buffer {
  const algorithm = der.sequence(der.objectIdentifier(OID.ecdsaWithSha256));
  // Positive and 16 bytes long (RFC 5280 allows up to 20): the high bit cleared, the first byte never zero.
  const serial = randomBytes(16);
  serial[0] = (serial[0] & 0x7f) | 0x01;
  const tbs = der.sequence(
    der.explicit(0, der.smallInteger(2)), // v3
    der.unsignedInteger(serial),
    algorithm,
    fields.issuer,
    der.sequence(der.time(fields.notBefore), der.time(fields.notAfter)),
    fields.subject,
    fields.publicKey.export({ type: 'spki', format: 'der' }),
    der.explicit(3, der.sequence(...fields.extensions)),
  );
  // node:crypto gives an ECDSA signature DER-encoded (SEQUENCE of r and s), as X.509 carries it.
  return der.sequence(tbs, algorithm, der.bitString(sign('sha256', tbs, fields.signingKey)));
}

function name(commonName: string): Buffer {
  return der.sequence(der.set(der.sequence(der.objectIdentifier(OID.commonName), der.utf8String(commonName))));
}

function extension(oid: string, critical: boolean, value: Buffer): Buffer {
  return der.sequence(der.objectIdentifier(oid), ...(critical ? [der.boolean(true)] : []), der.octetString(value));
}

/** The SHA-1 of the public key's point (RFC 5280 4.2.1.2, method 1): the CA's subject and the local certificate's authority key identifier. */
function keyIdentifier(publicKey: KeyObject): Buffer {
  const { x, y } = publicKey.export({ format: 'jwk' });
  const point = Buffer.concat([Buffer.from([0x04]), Buffer.from(x!, 'base64url'), Buffer.from(y!, 'base64url')]);
  return createHash('sha1').update(point).digest();
}

function pem(label: string, body: Buffer): string {
  return `-----BEGIN ${label}-----\n${body.toString('base64').match(/.{1,64}/g)!.join('\n')}\n-----END ${label}-----\n`;
}
