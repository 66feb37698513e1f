import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { upstreamBaseUrlFor } from '../../src/deps.ts';
import type { Sandbox } from '../../src/sandbox/sandbox.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { startTestSandbox, uniqueId, uniquePhone } from '../sandbox/helpers.ts';

describe('upstream wiring', () => {
  it('uses UPSTREAM_BASE_URL, else the in-process sandbox\'s URL, else the sandbox port', () => {
    const base = { DATA_DIR: '/tmp/msvc-wiring', ADMIN_TOKEN: 'x', SECRETS_KEY: '0'.repeat(64), UPSTREAM_APP_SECRET: 's', UPSTREAM_VERIFY_TOKEN: 'v' };
    expect(upstreamBaseUrlFor(loadConfig({ ...base, UPSTREAM_BASE_URL: 'https://graph.facebook.com/v21.0' }), { upstreamBaseUrl: 'http://x/v21.0' })).toBe('https://graph.facebook.com/v21.0');
    expect(upstreamBaseUrlFor(loadConfig(base), { upstreamBaseUrl: 'http://127.0.0.1:9/v21.0' })).toBe('http://127.0.0.1:9/v21.0');
    expect(upstreamBaseUrlFor(loadConfig({ ...base, PORT: '7000' }))).toBe('http://127.0.0.1:7001/v21.0');
  });
});

describe('deps.upstream against the sandbox', () => {
  let sandbox: Sandbox;
  let t: TestApp;
  beforeAll(async () => {
    sandbox = await startTestSandbox({ callbacks: false });
    t = await startTestApp({ UPSTREAM_BASE_URL: sandbox.baseUrl });
  });
  afterAll(async () => {
    await t.close();
    await sandbox.close();
  });

  it('sends through the configured upstream', async () => {
    const outcome = await t.deps.upstream.sendTemplate({ wabaId: uniqueId(), phoneNumberId: uniqueId(), accessToken: 't' }, { to: uniquePhone(), templateName: 'missing', language: 'en', components: [] });
    expect(outcome.kind === 'rejected' && outcome.error.code).toBe(132001);
  });
});
