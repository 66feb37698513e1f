import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { eventually, hasPostgres } from './helpers/app.ts';
import { SHOTS, seriousViolations, startConsoleServer, type ConsoleServer } from './helpers/console.ts';

// The web console (docs/console.md) in Debian's Firefox ESR, driven by puppeteer-core over WebDriver
// BiDi, which a stock Firefox speaks natively (playwright-core cannot drive it: it needs Playwright's
// patched, downloaded Firefox). test/console.e2e.test.ts covers the console's behaviour in Chromium;
// this file checks that the main pages work and hold their layout in Firefox too.
const FIREFOX = '/usr/bin/firefox-esr';
const missing = !existsSync(FIREFOX);
const title = 'the web console in Firefox (embedded default only: the test starts its own server, so the PostgreSQL pass skips it)'
  + (missing ? ` - SKIPPED: ${FIREFOX} is not installed (apt-get install firefox-esr; .ci/run does)` : '');

/** The first element whose text matches, as the page is now (null if none). */
/** Waits for an element matching `selector` whose whole text is `text` (or matches the pattern). */
async function findText(page: Page, selector: string, text: string | RegExp, timeout = 10_000) {
  const [source, flags] = typeof text === 'string' ? [`^${text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`, ''] : [text.source, text.flags];
  await page.waitForFunction((sel: string, src: string, fl: string) => {
    const re = new RegExp(src, fl);
    return [...(globalThis as any).document.querySelectorAll(sel)].some((e: any) => re.test(e.textContent.trim()));
  }, { timeout }, selector, source, flags).catch((e) => { throw new Error(`no ${selector} with text ${text}: ${e}`); });
}

describe.skipIf(hasPostgres || missing)(title, () => {
  let service: ConsoleServer;
  let browser: Browser;
  let page: Page;
  let campaignId = '';
  const problems: string[] = [];

  const go = async (hash: string, heading: string | RegExp) => {
    await page.evaluate((h: string) => { (globalThis as any).location.hash = h; }, hash);
    await findText(page, 'main h1', heading);
  };
  const accessible = async (name: string) => expect(await seriousViolations(page), `accessibility of ${name} in Firefox`).toEqual([]);

  beforeAll(async () => {
    const launched = puppeteer.launch({ browser: 'firefox', executablePath: FIREFOX, headless: true });
    service = await startConsoleServer();
    browser = await launched;
    const { api } = service;
    // An approved template, two contacts and a draft campaign to them, made through the API.
    const template = await api('POST', '/templates', {
      template_name: 'firefox_offer', language: 'en_US', category: 'MARKETING',
      components: [{ type: 'BODY', text: 'Hello {{1}}, your code is {{2}}.', example: { body_text: [['Ana', 'CODE1']] } }],
    });
    expect(template.status, JSON.stringify(template.body)).toBe(201);
    expect((await api('POST', `/templates/${template.body.id}/submit`)).status).toBe(200);
    await eventually(async () => (await api('GET', '/templates')).body.data.some((t: any) => t.id === template.body.id), 15_000, 100);
    const contacts = await api('POST', '/contacts/bulk', { contacts: [
      { first_name: 'Ana', phone: '+447400123501', tags: ['firefox'] }, { first_name: 'Ben', phone: '+447400123502', tags: ['firefox'] },
    ] });
    expect(contacts.body.created, JSON.stringify(contacts.body)).toBe(2);
    const campaign = await api('POST', '/campaigns', {
      name: 'Firefox launch', template_id: template.body.id, audience: { groups: ['firefox'] },
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'FOX' }] }] },
    });
    expect(campaign.status, JSON.stringify(campaign.body)).toBe(201);
    campaignId = campaign.body.id;

    page = await browser.newPage();
    page.setDefaultTimeout(10_000);
    await page.setViewport({ width: 1280, height: 900 });
    page.on('pageerror', (e) => problems.push(`page error: ${e instanceof Error ? e.message : String(e)}`));
    page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
    mkdirSync(SHOTS, { recursive: true });
  }, 90_000);

  // What the page showed when a test failed: its text in the error output, a screenshot beside the others.
  afterEach(async (context) => {
    if (context.task.result?.state !== 'fail' || !page || page.isClosed()) return;
    await page.screenshot({ path: join(SHOTS, `firefox-failed-${context.task.name.slice(0, 40).replace(/\W+/g, '-')}.png`), fullPage: true }).catch(() => {});
    console.error(`page ${page.url()} showed:\n${await page.evaluate(() => (globalThis as any).document.body.innerText).catch(() => '?')}`);
  });

  afterAll(async () => {
    await browser?.close();
    await service?.stop();
  });

  it('signs in with an API key, kept in sessionStorage only, and lists the campaigns', async () => {
    await page.goto(`${service.base}/console/`);
    await page.locator('input[name="api-key"]').fill(service.key);
    await accessible('sign-in');
    await page.locator('form button[type="submit"]').click();
    await findText(page, 'main h1', 'Campaigns');
    expect(await page.evaluate('[sessionStorage.getItem("console.key"), localStorage.length, location.href]')).toEqual([service.key, 0, `${service.base}/console/#/campaigns`]);
    await findText(page, 'main tbody tr', /^Firefox launch/);
    await accessible('campaigns');
  });

  it('a campaign\'s page follows it while it sends and shows it completed, with its charts and funnel', async () => {
    await go(`#/campaigns/${campaignId}`, 'Firefox launch');
    await findText(page, 'main .badge', 'DRAFT');
    const sent = await service.api('POST', `/campaigns/${campaignId}/send`);
    expect(sent.status, JSON.stringify(sent.body)).toBeLessThan(300);
    // The page polls a draft every 5 s, then every second while it runs.
    await findText(page, 'main .badge', 'COMPLETED', 25_000);
    await page.waitForFunction(() => (globalThis as any).document.querySelector('[aria-label="Campaign progress"]')?.getAttribute('aria-valuenow') === '100');
    await page.waitForFunction(() => (globalThis as any).document.querySelectorAll('figure[aria-label="Funnel chart"] .bar-row').length === 8);
    await findText(page, 'figure[aria-label="Funnel chart"] .bar-row', /^sent2$/);
    await findText(page, 'figure[aria-label="Funnel chart"] .bar-row', /^failed0$/);
    expect(await page.$$eval('.chart canvas', (c) => c.length)).toBeGreaterThan(0);
    // The sends-per-second chart has points from the polls made while the page watched.
    await page.waitForFunction(() => /, [1-9]\d* samples$/.test((globalThis as any).document.querySelector('.chart[role="img"]')?.getAttribute('aria-label') ?? ''), { timeout: 15_000 });
    await accessible('campaign page');
  }, 45_000);

  it('the builder renders the chosen template and its variable mapping; the contacts page lists contacts', async () => {
    await go('#/campaigns/new', 'New campaign');
    await page.waitForSelector('select option:not([value=""])');
    const option = await page.$eval('select option:not([value=""])', (o: any) => [o.value, o.textContent]);
    expect(option[1]).toBe('firefox_offer (en_US, MARKETING)');
    await page.select('form select[required]', option[0]);
    await findText(page, '.bubble p', 'Hello {{1}}, your code is {{2}}.');
    await page.waitForSelector('.mapping[data-slot="body.2"]');
    await accessible('campaign builder');

    await go('#/contacts', 'Contacts');
    await findText(page, 'main tbody tr', /Ana/);
    await findText(page, 'main tbody tr', /Ben/);
    await accessible('contacts');
  });

  it('layout holds at 1280 px and 390 px on each page: nothing wider than the window', async () => {
    const pages: [string, string, string | RegExp, string][] = [
      ['campaigns', '#/campaigns', 'Campaigns', 'main tbody tr'], ['campaign', `#/campaigns/${campaignId}`, 'Firefox launch', 'figure[aria-label="Funnel chart"] .bar-row'],
      ['builder', '#/campaigns/new', 'New campaign', 'select option:not([value=""])'], ['contacts', '#/contacts', 'Contacts', 'main tbody tr'],
    ];
    for (const width of [1280, 390]) {
      await page.setViewport({ width, height: width === 390 ? 844 : 900 });
      for (const [name, hash, heading, loaded] of pages) {
        await go(hash, heading);
        await page.waitForSelector(loaded);
        await page.screenshot({ path: join(SHOTS, `firefox-${name}-${width}.png`), fullPage: true });
        const [scrollWidth, innerWidth] = await page.evaluate('[document.documentElement.scrollWidth, innerWidth]') as [number, number];
        expect(innerWidth, `${name} at ${width} px`).toBe(width);
        expect(scrollWidth, `${name} at ${width} px`).toBeLessThanOrEqual(innerWidth);
      }
    }
    await accessible('contacts at 390 px');
  });

  it('no uncaught page error and nothing logged as a console error in any of it', () => {
    expect(problems).toEqual([]);
  });
});
