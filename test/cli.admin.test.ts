import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, API, makeTempDir, removeTempDir, startTestApp, type TestApp } from './helpers/app.ts';
import { listenOnLoopback, runCli } from './helpers/cli.ts';

// Every command is a process of its own (node, tsx, the CLI): seconds each on a loaded machine.
describe('msvc operator commands against a real service', { timeout: 120_000 }, () => {
  let t: TestApp;
  let url: string;
  let env: Record<string, string>;
  let dir: string;
  beforeAll(async () => {
    t = await startTestApp();
    url = await listenOnLoopback(t.app);
    env = { MSVC_URL: url, ADMIN_TOKEN };
    dir = makeTempDir('msvc-cli-');
  });
  afterAll(async () => {
    await t?.close();
    removeTempDir(dir);
  });

  const json = async (args: string[], extra: Record<string, string> = {}) => {
    const res = await runCli([...args, '--json'], { ...env, ...extra });
    expect(res.code, res.stderr).toBe(0);
    return JSON.parse(res.stdout);
  };

  it('creates, shows, updates and lists tenants (--json parsed, tables otherwise)', async () => {
    const name = `cli-${randomUUID().slice(0, 8)}`;
    const created = await json(['tenants', 'create', '--name', name, '--plan', 'starter']);
    expect(created).toMatchObject({ name, plan: 'starter', api_requests_daily: 10000 });
    expect(await json(['tenants', 'show', created.id])).toEqual(created);
    const updated = await json(['tenants', 'update', created.id, '--plan', 'business', '--daily-quota', '50000']);
    expect(updated).toMatchObject({ id: created.id, plan: 'business', api_requests_daily: 50000 });
    const page = await json(['tenants', 'list', '--name', name]);
    expect(page.data.map((x: { id: string }) => x.id)).toEqual([created.id]);

    const table = await runCli(['tenants', 'list', '--name', name], env);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(new RegExp(`${created.id}.*${name}.*business.*50000`));
    expect(table.stdout).toContain('page 1 of 1 (1 tenants)');
  });

  it('creates a key that works, lists it without its secret, and revokes it (it answers 401 at once)', async () => {
    const tenant = await json(['tenants', 'create', '--name', 'keys', '--plan', 'business']);
    const key = await json(['keys', 'create', tenant.id, '--name', 'ci', '--preset', 'read_only']);
    expect(key.key).toMatch(/^svc_sk_live_[0-9a-f]{40}$/);
    expect(key.scopes).toContain('contacts:read');
    const use = () => t.app.inject({ method: 'GET', url: `${API}/contacts`, headers: { authorization: `Bearer ${key.key}` } });
    expect((await use()).statusCode).toBe(200);

    const listed = await runCli(['keys', 'list', tenant.id, '--json'], env);
    expect(JSON.parse(listed.stdout).data).toEqual([expect.objectContaining({ id: key.id, name: 'ci', prefix: key.prefix })]);
    expect(listed.stdout).not.toContain(key.key);

    expect(await json(['keys', 'revoke', tenant.id, key.id])).toEqual({ message: expect.any(String) });
    const after = await use();
    expect(after.statusCode).toBe(401);
    expect(after.json().error.message).toBe('Invalid or revoked API key');
    expect((await json(['keys', 'list', tenant.id])).data).toEqual([]);
  });

  it('connects and disconnects a business account, and lists the scope vocabulary', async () => {
    const tenant = await json(['tenants', 'create', '--name', 'waba', '--plan', 'growth']);
    const phoneNumberId = `pn_${randomUUID().slice(0, 12)}`;
    const connected = await json(['business-account', 'connect', tenant.id, '--waba-id', 'waba_1', '--phone-number-id', phoneNumberId,
      '--access-token', 'tok', '--messages-per-second', '20', '--messaging-tier', '10K']);
    expect(connected).toMatchObject({ tenant_id: tenant.id, phone_number_id: phoneNumberId, status: 'active', messages_per_second: 20, messaging_tier: '10K' });
    expect(JSON.stringify(connected)).not.toContain('tok"');
    expect(await json(['business-account', 'disconnect', tenant.id])).toMatchObject({ status: 'disconnected' });

    const scopes = await json(['scopes']);
    expect(scopes.scopes).toHaveLength(12);
    expect(scopes.wildcard).toBe('*');
    expect(scopes.presets.map((p: { name: string }) => p.name)).toEqual(expect.arrayContaining(['read_only', 'campaigns', 'messaging', 'full_access']));
  });

  it('takes its configuration from a profile file, with flags and environment winning over it', async () => {
    const file = join(dir, 'profiles.json');
    writeFileSync(file, JSON.stringify({ ops: { url, admin_token: ADMIN_TOKEN }, broken: { url, admin_token: 'wrong' } }));
    const viaProfile = await runCli(['--config', file, '--profile', 'ops', 'scopes', '--json']);
    expect(viaProfile.code, viaProfile.stderr).toBe(0);
    expect(JSON.parse(viaProfile.stdout).scopes).toHaveLength(12);
    // The wrong token of the profile loses to the environment's.
    const [envWins, profileToken, noProfile] = await Promise.all([
      runCli(['--config', file, '--profile', 'broken', 'scopes'], { ADMIN_TOKEN }),
      runCli(['--config', file, '--profile', 'broken', 'scopes']),
      runCli(['--config', file, '--profile', 'missing', 'scopes']),
    ]);
    expect(envWins.code).toBe(0);
    expect(profileToken.code).toBe(4);
    expect(noProfile.code).toBe(2);
  });

  it('ends with exit codes scripts can rely on, and a JSON error with --json', async () => {
    // Independent runs, started together.
    const [noToken, wrongToken, missing, invalid, missingOption, unknownCommand, badNumber, help, unreachable] = await Promise.all([
      runCli(['scopes'], { MSVC_URL: url }),
      runCli(['scopes', '--json'], { MSVC_URL: url, ADMIN_TOKEN: 'adm_wrong' }),
      runCli(['tenants', 'show', randomUUID(), '--json'], env),
      runCli(['tenants', 'create', '--name', 'x', '--plan', 'platinum'], env),
      runCli(['tenants', 'create', '--name', 'x'], env),
      runCli(['tenants', 'frobnicate'], env),
      runCli(['tenants', 'list', '--limit', 'many'], env),
      runCli(['--help']),
      runCli(['scopes'], { MSVC_URL: 'http://127.0.0.1:9', ADMIN_TOKEN }),
    ]);
    expect(noToken.code).toBe(2);
    expect(noToken.stderr).toContain('no admin token');
    expect(wrongToken.code).toBe(4);
    expect(JSON.parse(wrongToken.stderr).error).toMatchObject({ status: 401, code: 'AUTHENTICATION_REQUIRED', request_id: expect.stringMatching(/^req_/) });
    expect(missing.code).toBe(3);
    expect(JSON.parse(missing.stderr).error).toMatchObject({ status: 404, code: 'NOT_FOUND' });
    expect(invalid.code).toBe(3);
    expect(invalid.stderr).toContain('VALIDATION_ERROR');
    expect(missingOption.code).toBe(2);
    expect(unknownCommand.code).toBe(2);
    expect(badNumber.code).toBe(2);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('contacts');
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toContain('cannot reach');
  });
});
