import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, eventually, makeTempDir, removeTempDir } from './helpers/app.ts';
import { bodyMapping, createCampaign } from './helpers/campaigns-api.ts';
import { CAMPAIGN_ENV, createContacts, runCampaignWorkers, someContacts, uniqueTag } from './helpers/campaigns.ts';
import { listenOnLoopback, runCli, spawnCli } from './helpers/cli.ts';
import { createApprovedTemplate, createConnectedTenant, sandboxControl, startUpstreamApp, type UpstreamTestApp } from './helpers/upstream.ts';

const jsonLines = (text: string) => text.split('\n').filter(Boolean).map((l) => JSON.parse(l));
const widestLine = (text: string) => Math.max(...text.split('\n').map((line) => [...line].length));

// Each msvc is a process of its own (node, tsx, the CLI): seconds to start on a loaded machine.
describe('msvc campaigns against a real service, sandbox and dispatcher', { timeout: 240_000 }, () => {
  let t: UpstreamTestApp;
  let url: string;
  let dir: string;
  // The watch polls through the API; the minute budget is not what this is about.
  beforeAll(async () => {
    t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000' });
    url = await listenOnLoopback(t.app);
    dir = makeTempDir('msvc-campaigns-');
  });
  afterAll(async () => {
    await t?.close();
    removeTempDir(dir);
  });

  it('creates campaigns from flags and from a body file (each POST with an Idempotency-Key), and lists them in a table no wider than 80 or 120 columns', async () => {
    const tenant = await createConnectedTenant(t.app);
    const env = { MSVC_URL: url, MSVC_API_KEY: tenant.key };
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    await createContacts(t, tenant, someContacts(2, { tags: [tag] }));
    const longName = 'Spring sale for the loyal customers of the north-west region, second wave';

    const fromFlags = await runCli(['campaigns', 'create', '--name', longName, '--template', template.id, '--groups', tag,
      '--body-fields', 'first_name,custom_fields.order', '--batch-size', '5', '--json'], env);
    expect(fromFlags.code, fromFlags.stderr).toBe(0);
    expect(JSON.parse(fromFlags.stdout)).toMatchObject({
      name: longName, status: 'DRAFT', template_id: template.id, batch_size: 5,
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'contact_field', field: 'custom_fields.order' }] }] },
    });

    // The whole body from a file; a flag replaces its field.
    const file = join(dir, 'body.json');
    writeFileSync(file, JSON.stringify({ name: 'From a file', description: 'in the file', template_id: template.id, audience: { groups: [tag] }, variable_mapping: bodyMapping() }));
    const fromFile = await runCli(['campaigns', 'create', '--file', file, '--description', 'from the flag'], env);
    expect(fromFile.code, fromFile.stderr).toBe(0);
    const [, fileId] = fromFile.stdout.match(/│ id +│ ([0-9a-f-]{36}) │/)!;
    expect(fromFile.stdout).toMatch(/│ status +│ DRAFT +│/);
    expect(fromFile.stdout).toContain(`msvc campaigns send ${fileId}`);
    const stored = await call(t.app, tenant, 'GET', `/campaigns/${fileId}`);
    expect(stored.json()).toMatchObject({ name: 'From a file', description: 'from the flag', audiences: [{ type: 'group', value: tag }] });

    // Every create carried a key: the service kept one per request. A given key repeats safely.
    const keyed = ['campaigns', 'create', '--name', 'Keyed', '--template', template.id, '--mapping', JSON.stringify(bodyMapping()), '--idempotency-key', randomUUID(), '--json'];
    const [first, again] = [await runCli(keyed, env), await runCli(keyed, env)];
    expect(JSON.parse(again.stdout).id).toBe(JSON.parse(first.stdout).id);
    const keys = await t.deps.db.selectFrom('idempotency_keys').select(['method', 'path']).where('tenant_id', '=', tenant.id).execute();
    expect(keys).toHaveLength(3);
    expect(keys.every((k) => k.method === 'POST')).toBe(true);

    // Not a terminal: 80 columns, or COLUMNS, or --width; ids stay whole, the rest gives way. --json is never cut.
    const [listed, narrow, wide, widthFlag] = await Promise.all([
      runCli(['campaigns', 'list', '--json'], env),
      runCli(['campaigns', 'list'], env),
      runCli(['campaigns', 'list'], { ...env, COLUMNS: '120' }),
      runCli(['campaigns', 'list', '--width', '120'], { ...env, COLUMNS: '60' }),
    ]);
    const campaigns = JSON.parse(listed.stdout).data as { id: string; name: string }[];
    expect(campaigns.map((c) => c.name)).toEqual(['Keyed', 'From a file', longName]);
    for (const [width, table] of [[80, narrow], [120, wide], [120, widthFlag]] as const) {
      expect(table.code, table.stderr).toBe(0);
      expect(widestLine(table.stdout), table.stdout).toBeLessThanOrEqual(width);
      expect(widestLine(table.stdout), table.stdout).toBeGreaterThan(width - 10);
      for (const c of campaigns) expect(table.stdout).toContain(c.id);
      expect(table.stdout).toMatch(/Spring sale[^│]*…/);
      expect(table.stdout).not.toContain(longName);
    }
    expect(narrow.stdout).toMatch(/… not shown: .*created/);
    expect(wide.stdout.split('\n')[1].split('│').length).toBeGreaterThan(narrow.stdout.split('\n')[1].split('│').length);

    const [noName, notJson, unknownTemplate] = await Promise.all([
      runCli(['campaigns', 'create', '--template', template.id], env),
      runCli(['campaigns', 'create', '--name', 'x', '--template', template.id, '--mapping', '{components'], env),
      runCli(['campaigns', 'create', '--name', 'x', '--template', randomUUID()], env),
    ]);
    expect([noName.code, notJson.code, unknownTemplate.code]).toEqual([2, 2, 3]);
    expect(noName.stderr).toContain('a campaign needs a name');
    expect(notJson.stderr).toContain('--mapping is not JSON');
    expect(unknownTemplate.stderr).toContain('404 NOT_FOUND');
  });

  it('sends (showing the pre-flight; the sandbox gets every message), pauses, resumes and stops through the CLI', async () => {
    const tenant = await createConnectedTenant(t.app);
    const env = { MSVC_URL: url, MSVC_API_KEY: tenant.key };
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    const contacts = await createContacts(t, tenant, someContacts(4, { tags: [tag] }));
    const create = async (name: string) => {
      const res = await runCli(['campaigns', 'create', '--name', name, '--template', template.id, '--groups', tag, '--mapping', JSON.stringify(bodyMapping()), '--json'], env);
      expect(res.code, res.stderr).toBe(0);
      return JSON.parse(res.stdout).id as string;
    };
    const status = async (args: string[]) => {
      const res = await runCli([...args, '--json'], env);
      expect(res.code, res.stderr).toBe(0);
      return JSON.parse(res.stdout).status as string;
    };

    // No dispatcher yet: the campaign stays RUNNING while it is paused, resumed and stopped.
    const [held, sent] = await Promise.all([create('Held'), create('Sent')]);
    expect(await status(['campaigns', 'send', held])).toBe('RUNNING');
    expect(await status(['campaigns', 'pause', held])).toBe('PAUSED');
    const resumed = await runCli(['campaigns', 'resume', held], env);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stdout).toMatch(/│ status +│ RUNNING +│/);
    expect(await status(['campaigns', 'stop', held])).toBe('STOPPED');
    const late = await runCli(['campaigns', 'pause', held], env);
    expect(late.code).toBe(3);
    expect(late.stderr).toContain('Cannot pause a campaign in status STOPPED');

    const send = await runCli(['campaigns', 'send', sent], env);
    expect(send.code, send.stderr).toBe(0);
    expect(send.stdout).toMatch(/│ status +│ RUNNING +│/);
    expect(send.stdout).toMatch(/│ audience +│ 4 +│/);
    expect(send.stdout).toMatch(/│ messaging limit +│ unlimited/);
    expect(send.stdout).toMatch(/│ estimated duration +│ \d+s +│/);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      await eventually(async () => (await call(t.app, tenant, 'GET', `/campaigns/${sent}`)).json().status === 'COMPLETED', 30_000);
    } finally {
      await workers.stop();
    }
    for (const contact of contacts) {
      const sends = (await sandboxControl(t.sandbox!, 'GET', `/__sandbox/sends?to=${encodeURIComponent(contact.phone)}`)).json.data;
      expect(sends, contact.phone).toHaveLength(1);
    }
    const list = await runCli(['campaigns', 'list', '--width', '200'], env);
    expect(list.stdout).toMatch(new RegExp(`${sent} │ Sent +│ COMPLETED │ 4/4 +│ 0 `));
    expect(list.stdout).toMatch(new RegExp(`${held} │ Held +│ STOPPED +│ 0/4 `));
  });

  it('follows a small campaign from DRAFT to COMPLETED, then shows its errors by code (exit 0)', async () => {
    const tenant = await createConnectedTenant(t.app);
    const env = { MSVC_URL: url, MSVC_API_KEY: tenant.key };
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    const contacts = await createContacts(t, tenant, someContacts(8, { tags: [tag] }));
    for (const contact of contacts.slice(0, 2)) {
      await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: contact.phone, outcome: 'reject', error_code: 131026 });
    }
    const campaign = await createCampaign(t, tenant, template.id, { audience: { groups: [tag] }, batch_size: 3 });

    const watch = spawnCli(['campaigns', 'watch', campaign.id, '--interval', '100', '--json'], env);
    await watch.waitFor(/"status":"DRAFT"/);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      expect((await call(t.app, tenant, 'POST', `/campaigns/${campaign.id}/send`)).statusCode).toBe(200);
      expect(await watch.exited).toBe(0);
    } finally {
      await workers.stop();
    }
    const lines = jsonLines(watch.stdout());
    const progress = lines.slice(0, -1);
    expect(progress[0]).toMatchObject({ id: campaign.id, status: 'DRAFT' });
    expect(progress.map((l) => l.status)).toContain('RUNNING');
    expect(progress.at(-1)).toMatchObject({ status: 'COMPLETED', stats: { total: 8, failed: 2, pending: 0, sent: 6 } });
    const { campaign: ended, errors } = lines.at(-1);
    expect(ended).toMatchObject({ id: campaign.id, status: 'COMPLETED' });
    expect(errors).toMatchObject({ total_failed: 2, by_code: [{ code: '131026', count: 2 }] });

    // Readable: the errors summary as a table.
    const table = await runCli(['campaigns', 'watch', campaign.id], env);
    expect(table.code).toBe(0);
    expect(table.stdout).toContain('ended COMPLETED');
    expect(table.stdout).toMatch(/131026.*│\s*2\s*│/);
  });

  it('ends with exit 6 when the campaign is stopped, and 3 for an unknown campaign', async () => {
    const tenant = await createConnectedTenant(t.app);
    const env = { MSVC_URL: url, MSVC_API_KEY: tenant.key };
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    await createContacts(t, tenant, someContacts(3, { tags: [tag] }));
    const campaign = await createCampaign(t, tenant, template.id, { audience: { groups: [tag] } });
    // No dispatcher for this tenant: it stays RUNNING with everyone pending until stopped.
    expect((await call(t.app, tenant, 'POST', `/campaigns/${campaign.id}/send`)).statusCode).toBe(200);
    const watch = spawnCli(['campaigns', 'watch', campaign.id, '--interval', '100', '--json'], env);
    await watch.waitFor(/"status":"RUNNING"/);
    expect((await call(t.app, tenant, 'POST', `/campaigns/${campaign.id}/stop`)).statusCode).toBe(200);
    expect(await watch.exited).toBe(6);
    expect(jsonLines(watch.stdout()).at(-1)).toMatchObject({ campaign: { status: 'STOPPED', stats: { pending: 3 } }, errors: { total_failed: 0 } });

    const unknown = await runCli(['campaigns', 'watch', '00000000-0000-4000-8000-000000000000'], env);
    expect(unknown.code).toBe(3);
    expect(unknown.stderr).toContain('NOT_FOUND');
  });
});
