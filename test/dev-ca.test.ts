import { X509Certificate } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.ts';
import { ensureDevCa } from '../src/crypto/dev-ca.ts';
import { makeTempDir, removeTempDir } from './helpers/app.ts';

describe('development CA (DATA_DIR/dev-ca)', () => {
  const dir = makeTempDir('dev-ca-');
  afterAll(() => removeTempDir(dir));

  it('is a CA and one certificate it signed for localhost, 127.0.0.1 and ::1; the CA key is not kept; a second start reuses it', async () => {
    const files = await ensureDevCa(dir);
    expect(readdirSync(files.dir).sort()).toEqual(['ca.pem', 'localhost-key.pem', 'localhost.pem']);
    expect(statSync(files.keyFile).mode & 0o777).toBe(0o600);
    const ca = new X509Certificate(readFileSync(files.caFile));
    const cert = new X509Certificate(readFileSync(files.certFile));
    expect(ca.ca).toBe(true);
    expect(cert.ca).toBe(false);
    expect(cert.verify(ca.publicKey)).toBe(true);
    expect(cert.checkIssued(ca)).toBe(true);
    expect(cert.subjectAltName).toBe('DNS:localhost, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1');
    expect(cert.keyUsage).toEqual(['1.3.6.1.5.5.7.3.1']); // serverAuth
    expect(cert.subject).toBe('CN=localhost');
    // Serial numbers are positive (RFC 5280 4.1.2.2): the high bit of 16 random bytes is clear.
    for (const c of [ca, cert]) expect(c.serialNumber).toMatch(/^[0-7][0-9A-F]{31}$/);
    expect(Date.parse(cert.validTo) - Date.parse(cert.validFrom)).toBeGreaterThan(364 * 24 * 3600 * 1000);
    expect(cert.checkPrivateKey((await import('node:crypto')).createPrivateKey(readFileSync(files.keyFile)))).toBe(true);

    const before = readFileSync(files.certFile, 'utf8');
    await ensureDevCa(dir);
    expect(readFileSync(files.certFile, 'utf8')).toBe(before);
    // Within a week of its end it is made anew.
    await ensureDevCa(dir, Date.parse(cert.validTo) - 24 * 3600 * 1000);
    expect(readFileSync(files.certFile, 'utf8')).not.toBe(before);
  });

  it('is trusted outside production only', () => {
    const production = { NODE_ENV: 'production', DATABASE_URL: 'postgres://x', ADMIN_TOKEN: 'a', SECRETS_KEY: 'a'.repeat(64), UPSTREAM_BASE_URL: 'https://u', UPSTREAM_APP_SECRET: 's', UPSTREAM_VERIFY_TOKEN: 'v' };
    expect(loadConfig({ ...production, WEBHOOK_DEV_CA: 'true', DATA_DIR: dir }).webhookDevCa).toBe(false);
    expect(loadConfig({ DATA_DIR: dir }).webhookDevCa).toBe(true);
    expect(loadConfig({ DATA_DIR: dir, WEBHOOK_DEV_CA: 'false' }).webhookDevCa).toBe(false);
  });
});
