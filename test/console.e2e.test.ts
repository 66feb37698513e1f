import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { eventually, hasPostgres } from './helpers/app.ts';
import { ROOT, SHOTS, seriousViolations, startConsoleServer, type ConsoleServer } from './helpers/console.ts';

// The web console (docs/console.md) in Debian's Chromium, driven by playwright-core, against the real
// service process on the embedded default. It starts its own server, so it runs once: in the
// embedded pass of CI, not again in the PostgreSQL one. test/console.firefox.test.ts covers Firefox.
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

describe.skipIf(hasPostgres)('the web console in Chromium (embedded default only: the test starts its own server, so the PostgreSQL pass skips it)', () => {
  let service: ConsoleServer;
  let browser: Browser;
  let base = '';
  let sandbox = '';
  let key = '';
  let tenant = '';
  let admin = '';
  let campaignId = '';
  const failingPhone = '+447400123403';

  const api = (method: string, path: string, body?: unknown, bearer = key) => service.api(method, path, body, bearer);

  /** Axe on the page as it is: no serious or critical violation. */
  const accessible = async (page: Page, name: string) => {
    const violations = await seriousViolations(page);
    expect(violations, `accessibility of ${name}`).toEqual([]);
  };

  let current: Page | null = null;
  // What the page showed when a test failed: its text in the error output, a screenshot beside the others.
  afterEach(async (context) => {
    if (context.task.result?.state !== 'fail' || !current || current.isClosed()) return;
    await current.screenshot({ path: join(SHOTS, `failed-${context.task.name.slice(0, 40).replace(/\W+/g, '-')}.png`), fullPage: true }).catch(() => {});
    console.error(`page ${current.url()} showed:\n${await current.locator('body').innerText().catch(() => '?')}`);
  });

  const newPage = async (): Promise<Page> => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    context.setDefaultTimeout(10_000);
    current = await context.newPage();
    return current;
  };

  const signedInPage = async (): Promise<Page> => {
    const page = await newPage();
    await page.goto(`${base}/console/`);
    await page.getByLabel('API key').fill(key);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Campaigns', level: 1 }).waitFor();
    return page;
  };

  beforeAll(async () => {
    service = await startConsoleServer();
    ({ base, sandbox, key, tenant, admin } = service);
    browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: CHROMIUM_ARGS, headless: true });
    mkdirSync(SHOTS, { recursive: true });
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    await service?.stop();
  });

  it('serves the built console compressed, its hashed assets cached for good, and a first load under 200 KB of compressed JavaScript and CSS', async () => {
    const page = await fetch(`${base}/console/`, { headers: { 'accept-encoding': 'br' } });
    expect(page.status).toBe(200);
    expect(page.headers.get('cache-control')).toBe('no-cache');
    const html = readFileSync(join(ROOT, 'dist', 'console', 'index.html'), 'utf8');
    const assets = [...html.matchAll(/(?:src|href)="\/console\/(assets\/[^"]+\.(?:js|css))"/g)].map((m) => m[1]);
    expect(assets.length).toBeGreaterThanOrEqual(2);
    let total = 0;
    for (const asset of assets) {
      const res = await fetch(`${base}/console/${asset}`, { headers: { 'accept-encoding': 'gzip' } });
      expect(res.headers.get('content-encoding')).toBe('gzip');
      expect(res.headers.get('cache-control')).toContain('immutable');
      total += readFileSync(join(ROOT, 'dist', 'console', `${asset}.gz`)).length;
    }
    expect(total).toBeLessThan(200 * 1024);
  });

  it('signs in with an API key (kept in sessionStorage only) and makes, submits and gets approved a template', async () => {
    const page = await newPage();
    await page.goto(`${base}/console/`);
    await accessible(page, 'sign-in');
    await page.getByLabel('API key').fill('svc_sk_live_' + '0'.repeat(40));
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('alert').filter({ hasText: 'Invalid or revoked API key' }).waitFor();
    await page.getByLabel('API key').fill(key);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Campaigns', level: 1 }).waitFor();
    expect(await page.evaluate('[sessionStorage.getItem("console.key"), localStorage.length, location.href]')).toEqual([key, 0, `${base}/console/#/campaigns`]);

    await page.getByRole('link', { name: 'Templates' }).click();
    await page.getByLabel('Name (lowercase, digits, _)').fill('console_offer');
    await page.getByLabel('Body').fill('Hello {{1}}, your offer code is {{2}}.');
    await page.getByLabel('Sample values for the variables (comma separated)').fill('Ana, CODE1');
    await page.getByRole('button', { name: 'Create draft' }).click();
    const card = page.getByRole('article', { name: 'console_offer' });
    await card.getByText('draft', { exact: true }).waitFor();
    await card.getByRole('button', { name: 'Submit for review' }).click();
    // The card shows the submit's answer (pending) until the list, reloaded at once, has it approved: on a
    // loaded machine the 50 ms review can end before that reload answers.
    await card.getByText(/^(pending|approved)$/).waitFor();
    expect(await card.getByRole('button', { name: 'Submit for review' }).count()).toBe(0);
    await eventually(async () => (await api('GET', '/templates')).body.data.some((t: any) => t.template_name === 'console_offer'), 15_000, 100);
    await page.reload();
    await page.getByRole('article', { name: 'console_offer' }).getByText('approved', { exact: true }).waitFor();
    await page.getByLabel('Status').selectOption('draft');
    await page.getByText('No templates in status draft.').waitFor();
    await page.getByLabel('Status').selectOption('approved');
    await page.getByRole('article', { name: 'console_offer' }).waitFor();
    await accessible(page, 'templates');
    await page.context().close();
  }, 90_000);

  it('imports a CSV audience (refused rows downloadable), builds a campaign with a mapped field, checks its previews, sends it and watches it complete', async () => {
    const page = await signedInPage();
    // The sandbox fails one recipient by status callback (docs/sandbox.md).
    expect((await fetch(`${sandbox}/recipients`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ to: failingPhone, outcome: 'fail', error_code: 131026 }) })).status).toBeLessThan(300);
    await page.getByRole('link', { name: 'Contacts' }).click();
    const csv = 'first_name,phone,tags,city\nAna,+447400123401,console,Lisbon\nBen,+447400123402,console;vip,Porto\nCai,+447400123403,console,Braga\nDee,+447400123404,console,\nEve,not-a-phone,console,Faro\n';
    await page.getByLabel('CSV file').setInputFiles({ name: 'audience.csv', mimeType: 'text/csv', buffer: Buffer.from(csv) });
    await page.getByRole('button', { name: 'Import' }).click();
    await page.getByText('5 of 5 rows sent: 4 created, 1 refused.').waitFor();
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download refused rows' }).click()]);
    const refused = readFileSync((await download.path())!, 'utf8');
    expect(refused).toContain('first_name,phone,tags,city,error');
    expect(refused).toContain('Eve,not-a-phone');
    await page.getByRole('link', { name: 'Ben' }).waitFor();
    await accessible(page, 'contacts');

    await page.getByRole('link', { name: 'Campaigns' }).click();
    await page.getByRole('button', { name: 'New campaign' }).click();
    await page.getByLabel('Name').fill('Console launch');
    const template = (await api('GET', '/templates')).body.data.find((t: any) => t.template_name === 'console_offer');
    await page.getByLabel('Template (approved)').selectOption(template.id);
    // The draft is saved as the person edits, and the previews follow each change (no save button).
    await page.getByLabel('Groups (contact tags, comma separated)').fill('vip');
    await expect.poll(() => page.locator('.audience-total').textContent(), { timeout: 10_000 }).toBe('1');
    await page.getByLabel('Render preview').getByText('Hello Ben, your offer code is').waitFor();
    await page.getByLabel('Groups (contact tags, comma separated)').fill('console');
    await expect.poll(() => page.locator('.audience-total').textContent(), { timeout: 10_000 }).toBe('4');
    await page.getByLabel('Field for body.1').selectOption('custom_fields.city');
    await page.getByLabel('Fallback for body.1').fill('friend');
    await page.getByLabel('Kind for body.2').selectOption('static');
    await page.getByLabel('Text for body.2').fill('SPRING');
    await page.getByRole('status').filter({ hasText: 'Draft saved.' }).waitFor();
    await accessible(page, 'campaign builder');
    const coverage = page.getByRole('table', { name: 'Field coverage' });
    await coverage.getByRole('row', { name: 'custom_fields.city 3 1' }).waitFor();
    await page.getByLabel('Render preview').getByText(/Hello (friend|Lisbon|Porto|Braga), your offer code is SPRING\./).waitFor();
    // A contact without a city gets the fallback.
    await page.getByLabel('Sample contact for the render preview').selectOption({ label: 'Dee +447400123404' });
    await page.getByLabel('Render preview').getByText('Hello friend, your offer code is SPRING.').waitFor();
    await page.getByLabel('Sample contact for the render preview').selectOption({ label: 'Ana +447400123401' });
    await page.getByLabel('Render preview').getByText('Hello Lisbon, your offer code is SPRING.').waitFor();
    await accessible(page, 'campaign builder with previews');
    await page.screenshot({ path: join(SHOTS, 'builder-previews-1280.png'), fullPage: true });

    await page.getByRole('button', { name: 'Review pre-flight and send' }).click();
    const dialog = page.getByRole('dialog');
    await dialog.getByText('Audience: 4').waitFor();
    await dialog.getByRole('button', { name: 'Yes, send now' }).click();
    await page.waitForURL(/#\/campaigns\/[0-9a-f-]+$/);
    campaignId = page.url().split('/').pop()!;
    await page.getByText('COMPLETED', { exact: true }).waitFor({ timeout: 30_000 });
    // Every stat the API returns: sent, delivered, read, replied, clicked, failed, deferred, skipped.
    await expect.poll(async () => page.getByRole('figure', { name: 'Funnel chart' }).locator('.bar-row').allTextContents(), { timeout: 15_000 })
      .toEqual([/^sent3$/, /^delivered\d$/, /^read\d$/, 'replied0', 'clicked0', 'failed1', 'deferred0', 'skipped0'].map((m) => typeof m === 'string' ? m : expect.stringMatching(m)));
    await page.getByText(/^Of those sent: [\d.]+% delivered, [\d.]+% read, 0% replied, 0% clicked\.$/).waitFor();
    expect(await page.locator('.chart canvas').count()).toBeGreaterThan(0);
    // The sends-per-second chart has points from the polls made while the page watched.
    await expect.poll(() => page.getByRole('img', { name: /^Sends per second:/ }).getAttribute('aria-label'), { timeout: 15_000 }).toMatch(/, [1-9]\d* samples$/);
    await page.getByRole('progressbar', { name: 'Campaign progress' }).and(page.locator('[aria-valuenow="100"]')).waitFor();
    await accessible(page, 'campaign page');
    await page.getByRole('link', { name: 'Campaigns' }).click();
    await page.getByRole('row', { name: /Console launch/ }).getByText(/^3 sent · \d delivered · \d read · 0 replied · 0 clicked · 1 failed · 0 deferred · 0 skipped · 0 held · 0 pending$/).waitFor();
    await page.context().close();
  }, 90_000);

  it('opens the failure group made in the sandbox, drills into its recipients and retargets it', async () => {
    const page = await signedInPage();
    await page.goto(`${base}/console/#/campaigns/${campaignId}`);
    const group = page.locator('.error-group').filter({ hasText: '131026' });
    await group.waitFor();
    await group.getByRole('button', { name: 'Show recipients' }).click();
    await group.getByRole('cell', { name: failingPhone }).waitFor();
    await accessible(page, 'errors drill-down');
    await page.getByRole('combobox', { name: 'Status' }).selectOption('failed');
    await page.locator('section[aria-labelledby="rec-h"] tbody tr').first().getByText(failingPhone).waitFor();
    await group.getByRole('button', { name: 'Retarget these' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Yes, make the retarget campaign' }).click();
    await page.waitForURL((url) => /#\/campaigns\/[0-9a-f-]+$/.test(url.hash) && !url.hash.endsWith(campaignId));
    await page.getByText('DRAFT', { exact: true }).waitFor();
    await page.getByText('Audience: 1 ').first().waitFor();
    await page.context().close();
  }, 90_000);

  it('schedules, pauses and resumes a campaign, each confirmed, and says a refused action (400) in words with its request id', async () => {
    const template = (await api('GET', '/templates')).body.data.find((t: any) => t.template_name === 'console_offer');
    const made = await api('POST', '/campaigns', {
      name: 'Later', template_id: template.id, audience: { groups: ['vip'] },
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'X' }] }] },
    });
    expect(made.status).toBe(201);
    const page = await signedInPage();
    await page.goto(`${base}/console/#/campaigns/${made.body.id}`);
    await page.getByText('DRAFT', { exact: true }).waitFor();
    const local = (d: Date) => new Date(d.getTime() - d.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
    await page.getByRole('button', { name: 'Schedule' }).click();
    const dialog = page.getByRole('dialog');
    await dialog.getByLabel('Start at (your local time)').fill(local(new Date(Date.now() - 3600_000)));
    await dialog.getByRole('button', { name: 'Yes, schedule' }).click();
    await dialog.getByRole('alert').filter({ hasText: 'scheduled_at must be in the future' }).filter({ hasText: /Request id: req_/ }).waitFor();
    await dialog.getByLabel('Start at (your local time)').fill(local(new Date(Date.now() + 3600_000)));
    await dialog.getByRole('button', { name: 'Yes, schedule' }).click();
    await page.getByText('SCHEDULED', { exact: true }).waitFor();
    await page.getByRole('button', { name: 'Pause' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Yes, pause' }).click();
    await page.getByText('PAUSED', { exact: true }).waitFor();
    await page.getByRole('button', { name: 'Resume' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Yes, resume' }).click();
    await page.getByText('COMPLETED', { exact: true }).or(page.getByText('RUNNING', { exact: true })).waitFor({ timeout: 15_000 });
    await page.context().close();
  }, 90_000);

  it('a contact\'s page adds a note and a follow-up and marks it done; the message log shows received messages beside sent ones', async () => {
    // A user writes to the business through the sandbox (docs/sandbox.md): an inbound message.
    const inbound = await fetch(`${sandbox}/inbound`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ to_phone_number_id: '100000000000002', from: '+447400123401', text: 'Hello from Ana' }) });
    expect(inbound.status, await inbound.text()).toBeLessThan(300);
    const contact = (await api('GET', '/contacts?search=Ana')).body.data[0];
    const page = await signedInPage();
    await page.goto(`${base}/console/#/contacts/${contact.id}`);
    await page.getByRole('heading', { name: /Ana/, level: 1 }).waitFor();
    await page.getByLabel('New note').fill('Asked for the spring catalogue.');
    await page.getByRole('button', { name: 'Add note' }).click();
    await page.locator('.notes').getByText('Asked for the spring catalogue.').waitFor();
    await page.getByLabel('Follow-up', { exact: true }).fill('Call back');
    await page.getByLabel('Due (your local time)').fill('2030-05-01T09:00');
    await page.getByLabel('Follow-up notes').fill('Prefers mornings');
    await page.getByRole('button', { name: 'Add follow-up' }).click();
    await page.getByRole('button', { name: 'Mark Call back done' }).click();
    await page.getByRole('button', { name: 'Reopen Call back' }).waitFor();
    const [notes, followups] = [(await api('GET', `/contacts/${contact.id}/notes`)).body.data, (await api('GET', `/contacts/${contact.id}/followups`)).body.data];
    expect(notes.map((n: any) => n.content)).toEqual(['Asked for the spring catalogue.']);
    expect(followups).toMatchObject([{ title: 'Call back', done: true, notes: 'Prefers mornings', due_at: new Date('2030-05-01T09:00').toISOString() }]);
    await accessible(page, 'contact page with notes and follow-ups');

    await page.getByRole('link', { name: 'Messages' }).click();
    await page.getByRole('row', { name: /received .*Hello from Ana/ }).waitFor();
    await page.getByRole('row', { name: /sent .*console_offer/ }).first().waitFor();
    await page.getByLabel('Direction').selectOption('inbound');
    await expect.poll(() => page.locator('tbody tr').allTextContents()).toEqual([expect.stringContaining('Hello from Ana')]);
    await page.context().close();
  }, 60_000);

  it('webhooks: the delivery log shows a delivery\'s request body and its response', async () => {
    const page = await signedInPage();
    await page.getByRole('link', { name: 'Webhooks' }).click();
    // Nothing listens on port 9 here: the test event fails, and its delivery is in the log with what it sent.
    await page.getByLabel('HTTPS URL').fill('https://127.0.0.1:9/hook');
    await page.getByRole('button', { name: 'Add endpoint' }).click();
    await page.getByText('Keep the signing secret').waitFor();
    await page.getByRole('article', { name: 'https://127.0.0.1:9/hook' }).getByRole('button', { name: 'Send test event' }).click();
    await page.getByText('Test event to https://127.0.0.1:9/hook').waitFor();
    const row = page.getByRole('row', { name: /webhook\.test/ }).first();
    await row.getByRole('button', { name: 'Details' }).click();
    const body = page.getByLabel('Request body');
    await body.getByText('"type": "webhook.test"').waitFor();
    await page.getByText('no response').first().waitFor();
    await accessible(page, 'delivery details');
    await page.context().close();
  }, 60_000);

  it('a 429 and a lost connection are retried and said in a banner, never a blank page; a stopped import resumes where it stopped', async () => {
    const page = await signedInPage();
    // Only the app's own calls are intercepted, once each: a 429 with Retry-After, then a dropped connection.
    let limited = 0;
    await page.route('**/api/v1/public/contacts/search*', async (route) => {
      limited++;
      if (limited === 1) await route.fulfill({ status: 429, headers: { 'retry-after': '1', 'content-type': 'application/json' }, body: JSON.stringify({ success: false, error: { code: 'RATE_LIMITED', message: 'Too many requests' } }) });
      else if (limited === 2) await route.abort('connectionreset');
      else await route.continue();
    });
    await page.getByRole('link', { name: 'Contacts' }).click();
    await page.getByRole('status').filter({ hasText: 'Rate limited by the API (429); retrying in 1 s' }).waitFor();
    await page.getByRole('status').filter({ hasText: /Connection lost; retrying in \d s/ }).waitFor();
    await page.getByRole('link', { name: 'Ben' }).waitFor();
    expect(await page.locator('.notice').count()).toBe(0);
    expect(limited).toBe(3);
    await page.unroute('**/api/v1/public/contacts/search*');

    // An import whose second batch is refused by the server stops there; importing the same file again sends only what is left.
    const rows = Array.from({ length: 150 }, (_, i) => `P${i},+4474009${String(i).padStart(5, '0')},resume`);
    const csv = Buffer.from(`first_name,phone,tags\n${rows.join('\n')}\n`);
    const batches: number[] = [];
    await page.route('**/api/v1/public/contacts/bulk', async (route) => {
      const size = (route.request().postDataJSON() as { contacts: unknown[] }).contacts.length;
      batches.push(size);
      if (batches.length === 2) await route.fulfill({ status: 503, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ success: false, error: { code: 'SERVICE_UNAVAILABLE', message: 'Try again shortly' } }) });
      else await route.continue();
    });
    await page.getByLabel('CSV file').setInputFiles({ name: 'resume.csv', mimeType: 'text/csv', buffer: csv });
    await page.getByRole('button', { name: 'Import' }).click();
    await page.getByRole('alert').filter({ hasText: 'Try again shortly' }).waitFor();
    await page.getByText('100 of 150 rows sent: 100 created, 0 refused.').waitFor();
    await page.getByText('Import the same file again to resume where it stopped.').waitFor();
    await page.getByRole('button', { name: 'Import' }).click();
    await page.getByText('150 of 150 rows sent: 150 created, 0 refused.').waitFor();
    expect(batches).toEqual([100, 50, 50]);
    expect((await api('POST', '/contacts/search?limit=1', { tag: 'resume' })).body.pagination.total_items).toBe(150);
    await page.context().close();
  }, 60_000);

  it('signs in with an operator one-time link to a read-only key, which sees actions disabled with the missing scope, and sign-out revokes it', async () => {
    const res = await fetch(`${base}/admin/v1/tenants/${tenant}/console-links`, {
      method: 'POST', headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' }, body: JSON.stringify({ preset: 'read_only' }),
    });
    expect(res.status).toBe(201);
    const link = await res.json() as { url: string; expires_at: string };
    expect(Date.parse(link.expires_at) - Date.now()).toBeGreaterThan(14 * 60_000);
    const page = await newPage();
    await page.goto(link.url);
    await page.getByRole('heading', { name: 'Campaigns', level: 1 }).waitFor();
    expect(page.url()).not.toContain('csl_');
    const sessionKey = await page.evaluate('sessionStorage.getItem("console.key")') as string | null;
    expect(sessionKey).toMatch(/^svc_sk_live_/);
    expect(sessionKey).not.toBe(key);
    expect(await page.getByRole('button', { name: 'New campaign (needs campaigns:write)' }).isDisabled()).toBe(true);
    await page.getByRole('link', { name: 'Console launch', exact: true }).click();
    await page.locator('.error-group').first().waitFor();
    expect(await page.getByRole('button', { name: 'Retarget these (needs campaigns:write)' }).isDisabled()).toBe(true);
    await page.getByRole('link', { name: 'Contacts' }).click();
    expect(await page.getByRole('button', { name: 'Import (needs contacts:write)' }).isDisabled()).toBe(true);
    await page.getByRole('link', { name: 'Templates' }).click();
    expect(await page.getByRole('button', { name: 'Create draft (needs templates:write)' }).isDisabled()).toBe(true);
    expect((await api('GET', '/contacts', undefined, sessionKey!)).status).toBe(200);

    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('API key').waitFor();
    expect(await page.evaluate('sessionStorage.getItem("console.key")') as string | null).toBeNull();
    await eventually(async () => (await api('GET', '/contacts', undefined, sessionKey!)).status === 401, 5000, 100);
    // A link works once.
    await page.goto(link.url);
    await page.getByRole('alert').filter({ hasText: 'invalid, expired or already used' }).waitFor();
    await page.context().close();
  }, 90_000);

  it('every page at 1280 px and 390 px: screenshots for a person, and no serious or critical accessibility violation', async () => {
    const contact = (await api('GET', '/contacts?search=Ana')).body.data[0];
    const pages: [string, string, string | RegExp][] = [['campaigns', '#/campaigns', 'Campaigns'], ['campaign', `#/campaigns/${campaignId}`, 'Console launch'], ['builder', '#/campaigns/new', 'New campaign'],
      ['contacts', '#/contacts', 'Contacts'], ['contact', `#/contacts/${contact.id}`, /Ana/], ['templates', '#/templates', 'Templates'], ['messages', '#/messages', 'Messages'], ['webhooks', '#/webhooks', 'Webhooks']];
    // What shows that a page has its data, before its screenshot.
    const loaded: Record<string, (page: Page) => Promise<void>> = {
      campaign: (p) => p.getByRole('figure', { name: 'Funnel chart' }).waitFor(),
      builder: (p) => p.locator('option', { hasText: 'console_offer' }).waitFor({ state: 'attached' }),
      contact: (p) => p.locator('.followups li').first().waitFor(),
      templates: (p) => p.getByRole('article').first().waitFor(),
      webhooks: (p) => p.getByRole('table').waitFor(),
    };
    const page = await signedInPage();
    for (const width of [1280, 390]) {
      await page.setViewportSize({ width, height: width === 390 ? 844 : 900 });
      for (const [name, hash, heading] of pages) {
        // In-app navigation (no reload), as a person moves between pages.
        await page.evaluate((h) => { (globalThis as any).location.hash = h; }, hash);
        // A loaded machine (CI runs two files at once) can take over 10 s to fill a page.
        await page.getByRole('heading', { name: heading, level: 1 }).waitFor({ timeout: 30_000 });
        await (loaded[name] ?? ((p: Page) => p.locator('main table').first().waitFor()))(page);
        await page.screenshot({ path: join(SHOTS, `${name}-${width}.png`), fullPage: true });
        // Nothing wider than the phone: the layout holds at 390 px.
        if (width === 390) expect(await page.evaluate('document.documentElement.scrollWidth') as number, `${name} at 390 px`).toBeLessThanOrEqual(390);
        await accessible(page, `${name} at ${width} px`);
      }
    }
    await page.context().close();
  }, 180_000);
});
