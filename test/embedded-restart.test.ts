import { execSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { makeTempDir, removeTempDir } from './helpers/app.ts';
import { freePort, startServer, stopServer, waitForHttp, type ServerProcess } from './helpers/process.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

// Runs with or without DATABASE_URL/REDIS_URL: the embedded default, stopped and started again.
describe('embedded default across a restart', () => {
  const dataDir = makeTempDir('msvc-restart-');
  let server: ServerProcess | undefined;
  afterAll(async () => {
    await stopServer(server);
    removeTempDir(dataDir);
  });

  it('the sandbox keeps templates, review outcomes and pending reviews; a restart prints the command that mints a demo key, and it works', { timeout: 300_000 }, async () => {
    const port = await freePort();
    const sandboxPort = await freePort();
    const env = { PORT: String(port), SANDBOX_PORT: String(sandboxPort), DATA_DIR: dataDir, LOG_LEVEL: 'warn', SANDBOX_REVIEW_MS: '200', RATE_LIMIT_PER_MINUTE: '100000' };
    const base = `http://127.0.0.1:${port}`;
    const sandbox = `http://127.0.0.1:${sandboxPort}/__sandbox`;
    const post = (url: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    const template = (name: string) => ({ template_name: name, language: 'en', category: 'UTILITY', components: [{ type: 'BODY', text: 'Hello {{1}}, welcome.', example: { body_text: [['Ada']] } }] });
    const send = (key: string, name: string, to: string) =>
      post(`${base}/api/v1/public/messages/template`, { to, template_name: name, language: 'en', components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ada' }] }] }, { authorization: `Bearer ${key}` });
    /** The public API shows approved templates only. */
    async function approved(key: string, id: string): Promise<void> {
      for (let i = 0; ; i++) {
        const got = await fetch(`${base}/api/v1/public/templates/${id}`, { headers: { authorization: `Bearer ${key}` } });
        if (got.status === 200 && (await got.json() as Json).status === 'approved') return;
        if (i > 1200) throw new Error(`template ${id} not approved: ${got.status}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    /** The template as the sandbox (the upstream) holds it. */
    async function upstreamStatus(name: string, wanted: string): Promise<Json> {
      for (let i = 0; ; i++) {
        const found = ((await (await fetch(`${sandbox}/templates`)).json() as Json).data as Json[]).find((t) => t.name === name);
        if (found?.status === wanted) return found;
        if (i > 1200) throw new Error(`upstream template ${name} is not ${wanted}: ${JSON.stringify(found)}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    }

    server = startServer(env);
    await waitForHttp(`${base}/healthz`, server, 120_000);
    const [, apiKey] = await server.waitForOutput(/API key:\s+(svc_sk_live_[0-9a-f]{40})/);
    const auth = { authorization: `Bearer ${apiKey}` };

    const first = await (await post(`${base}/api/v1/public/templates`, template('restart_approved'), auth)).json() as Json;
    expect((await post(`${base}/api/v1/public/templates/${first.id}/submit`, {}, auth)).status).toBe(200);
    await approved(apiKey, first.id);
    expect((await send(apiKey, 'restart_approved', '+14155550101')).status).toBe(200);
    // A reviewer's decision for a template not submitted yet, and a review still running at shutdown.
    expect((await post(`${sandbox}/templates/review`, { name: 'restart_rejected', language: 'en', status: 'REJECTED', reason: 'INCORRECT_CATEGORY' })).status).toBe(200);
    expect((await fetch(`${sandbox}/config`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: '{"review_ms":600000}' })).status).toBe(200);
    const pending = await (await post(`${base}/api/v1/public/templates`, template('restart_pending'), auth)).json() as Json;
    expect((await post(`${base}/api/v1/public/templates/${pending.id}/submit`, {}, auth)).status).toBe(200);
    await upstreamStatus('restart_pending', 'PENDING');

    server.child.kill('SIGTERM');
    expect(await server.exited).toEqual({ code: 0, signal: null });
    expect(existsSync(join(dataDir, 'sandbox-state.json'))).toBe(true);

    server = startServer(env);
    await waitForHttp(`${base}/healthz`, server, 120_000);
    // The approved template sends as before (it was 502 with upstream code 132001).
    const again = await send(apiKey, 'restart_approved', '+14155550102');
    expect(again.status).toBe(200);
    const sends = await (await fetch(`${sandbox}/sends?to=14155550102`)).json() as Json;
    expect(sends.data).toHaveLength(1);
    // The pending review completes under this process (SANDBOX_REVIEW_MS) and its callback arrives.
    await approved(apiKey, pending.id);
    // The decision made before the restart applies when the template is submitted after it.
    const rejected = await (await post(`${base}/api/v1/public/templates`, template('restart_rejected'), auth)).json() as Json;
    expect((await post(`${base}/api/v1/public/templates/${rejected.id}/submit`, {}, auth)).status).toBe(200);
    expect(await upstreamStatus('restart_rejected', 'REJECTED')).toMatchObject({ rejected_reason: 'INCORRECT_CATEGORY' });

    // The restart banner: no key (only its hash is kept), where the admin token is, one command for a new key.
    const [, tenantId] = await server.waitForOutput(/Demo tenant ([0-9a-f-]{36}): its API key was shown at the first start only/);
    await server.waitForOutput(new RegExp(`API docs:\\s+${base}/docs `));
    await server.waitForOutput(new RegExp(`Sandbox:\\s+http://127\\.0\\.0\\.1:${sandboxPort} \\(SANDBOX_PORT;`));
    expect(server.output()).not.toMatch(/API key:\s+svc_sk_live_/);
    expect(server.output()).toContain(`ADMIN_TOKEN in ${join(dataDir, 'dev-secrets.json')}`);
    const command = /(curl -s -X POST \S+\/admin\/v1\/tenants\/\S+\/api-keys .*\\\n.*)\n/.exec(server.output())?.[1];
    expect(command).toBeDefined();
    const minted = JSON.parse(execSync(command!, { encoding: 'utf8', shell: '/bin/sh' }));
    expect(minted.key).toMatch(/^svc_sk_live_/);
    expect((await send(minted.key, 'restart_approved', '+14155550103')).status).toBe(200);
    // The operator finds the tenant by name.
    const token = JSON.parse(readFileSync(join(dataDir, 'dev-secrets.json'), 'utf8')).ADMIN_TOKEN;
    const found = await (await fetch(`${base}/admin/v1/tenants?name=demo`, { headers: { authorization: `Bearer ${token}` } })).json() as Json;
    expect(found.data.map((t: { id: string }) => t.id)).toEqual([tenantId]);

    server.child.kill('SIGTERM');
    expect(await server.exited).toEqual({ code: 0, signal: null });
  });
});
