import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'csv-parse/sync';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTenant, eventually, makeTempDir, removeTempDir, startTestApp, uniquePhone, type TestApp } from './helpers/app.ts';
import { listenOnLoopback, runCli, spawnCli } from './helpers/cli.ts';

/** A CSV with the given rows under a header the CLI has to guess from; bad rows are placed by row number (1-based). */
function csvFile(dir: string, name: string, rows: number, bad: Record<number, Partial<Record<'first' | 'phone' | 'email', string>>>): { path: string; phones: string[] } {
  const lines = ['First Name,Last Name,Mobile,E-mail,Tags,Plan Tier,City'];
  const phones: string[] = [];
  for (let row = 1; row <= rows; row++) {
    const phone = bad[row]?.phone ?? uniquePhone();
    phones.push(phone);
    const first = bad[row]?.first ?? `Ana ${row}`;
    const email = bad[row]?.email ?? `ana.${row}@example.com`;
    lines.push([first, `"Silva, ${row}"`, phone, email, row % 2 ? '"vip;early"' : 'late', 'gold', row % 3 ? 'Lisbon' : ''].join(','));
  }
  const path = join(dir, name);
  writeFileSync(path, `${lines.join('\n')}\n`);
  return { path, phones };
}

const readState = (file: string) => JSON.parse(readFileSync(`${file}.import-state.json`, 'utf8'));
/** The state's confirmed batches, 0 before the run has written it. */
const confirmedBatches = (file: string): number => {
  try {
    return readState(file).confirmed_batches;
  } catch {
    return 0;
  }
};

// Every run is a process of its own (node, tsx, the CLI): seconds each on a loaded machine.
describe('msvc contacts import against a real service', { timeout: 180_000 }, () => {
  let t: TestApp;
  let url: string;
  let dir: string;
  beforeAll(async () => {
    // Many bulk requests: the minute budget is not what these tests are about.
    t = await startTestApp({ RATE_LIMIT_PER_MINUTE: '1000000' });
    url = await listenOnLoopback(t.app);
    dir = makeTempDir('msvc-import-');
  });
  afterAll(async () => {
    await t?.close();
    removeTempDir(dir);
  });

  const contactsOf = (tenantId: string) => t.deps.db.selectFrom('contacts').selectAll().where('tenant_id', '=', tenantId).execute();

  it('imports in batches, maps the columns, and writes the refused rows with their errors (exit 5)', async () => {
    const tenant = await createTenant(t.app);
    const first = uniquePhone();
    const file = csvFile(dir, 'people.csv', 230, {
      3: { phone: first },
      5: { phone: '+44 7400 123456' },
      17: { email: 'not-an-email' },
      40: { first: '' },
      30: { phone: first }, // same batch as row 3 (batches of 50 answer in any order)
      150: { phone: '12345' },
    });
    const res = await runCli(['contacts', 'import', file.path, '--batch-size', '50', '--concurrency', '3', '--json'], { MSVC_URL: url, MSVC_API_KEY: tenant.key });
    expect(res.code, res.stderr).toBe(5);
    const summary = JSON.parse(res.stdout);
    expect(summary).toMatchObject({ rows: 230, created: 225, refused: 5, rows_this_run: 230, completed: true, interrupted: false, refused_file: `${file.path}.refused.csv` });

    const refused = parse(readFileSync(summary.refused_file, 'utf8'), { columns: true }) as Record<string, string>[];
    expect(refused.map((r) => Number(r.row))).toEqual([5, 17, 30, 40, 150]);
    expect(refused.map((r) => Number(r.line))).toEqual([6, 18, 31, 41, 151]);
    expect(refused[0]).toMatchObject({ Mobile: '+44 7400 123456', error: expect.stringContaining('+447400123456') });
    expect(refused[1].error).toMatch(/email/);
    expect(refused[2].error).toBe('duplicate phone in this batch (same as item 2)');
    expect(refused[3].error).toMatch(/first_name/);
    expect(refused[4].error).toMatch(/phone/);

    const stored = await contactsOf(tenant.id);
    expect(stored).toHaveLength(225);
    const one = stored.find((c) => c.phone === file.phones[0])!;
    expect(one).toMatchObject({ first_name: 'Ana 1', last_name: 'Silva, 1', tags: ['vip', 'early'], custom_fields: { 'Plan Tier': 'gold', City: 'Lisbon' }, source: 'bulk' });
    const third = stored.find((c) => c.phone === file.phones[2])!;
    expect(third).toMatchObject({ tags: ['vip', 'early'], custom_fields: { 'Plan Tier': 'gold' } });
  });

  it('resumes after Ctrl-C and after a hard kill without creating any contact twice or repeating a refused row', async () => {
    const tenant = await createTenant(t.app);
    const env = { MSVC_URL: url, MSVC_API_KEY: tenant.key };
    const file = csvFile(dir, 'big.csv', 1500, { 7: { phone: '0044 7400 123456' }, 1203: { email: 'nope' } });
    const args = ['contacts', 'import', file.path, '--batch-size', '10', '--concurrency', '2', '--json'];

    // Ctrl-C: the batches in flight finish, the state is saved, exit 130.
    const a = spawnCli(args, env);
    await eventually(async () => confirmedBatches(file.path) >= 15, 60_000);
    a.child.kill('SIGINT');
    expect(await a.exited).toBe(130);
    const afterA = readState(file.path);
    expect(JSON.parse(a.stdout())).toMatchObject({ interrupted: true, completed: false, rows: afterA.confirmed_rows });
    expect(afterA.confirmed_rows).toBe(afterA.confirmed_batches * 10);
    const rawA = readFileSync(`${file.path}.import-state.json`, 'utf8');

    // A hard kill, and then the state as if the kill had come before any of this run's batches was
    // recorded: the service took them, the state file does not know.
    const b = spawnCli(args, env);
    await eventually(async () => confirmedBatches(file.path) >= afterA.confirmed_batches + 10, 60_000);
    b.child.kill('SIGKILL');
    await b.exited;
    const takenByB = readState(file.path).confirmed_batches - afterA.confirmed_batches;
    writeFileSync(`${file.path}.import-state.json`, rawA);

    const c = await runCli(args, env);
    expect(c.code, c.stderr).toBe(5);
    const summary = JSON.parse(c.stdout);
    expect(summary).toMatchObject({ rows: 1500, created: 1498, refused: 2, completed: true, resumed_from_row: afterA.confirmed_rows });
    // Run B's batches came back from the service's Idempotency-Key store, nothing created again.
    expect(summary.replayed_batches).toBeGreaterThanOrEqual(takenByB);
    const refused = parse(readFileSync(summary.refused_file, 'utf8'), { columns: true }) as Record<string, string>[];
    expect(refused.map((r) => Number(r.row))).toEqual([7, 1203]);
    const stored = await contactsOf(tenant.id);
    expect(stored).toHaveLength(1498);
    expect(new Set(stored.map((s) => s.phone)).size).toBe(1498);

    // Finished: running it again imports nothing.
    const again = await runCli(args, env);
    expect(JSON.parse(again.stdout)).toMatchObject({ rows: 1500, rows_this_run: 0, completed: true });
    expect(await contactsOf(tenant.id)).toHaveLength(1498);
  });

  it('refuses a file without a phone column or with a changed file under an unfinished import (exit 2), and a wrong key (exit 4)', async () => {
    const tenant = await createTenant(t.app);
    const env = { MSVC_URL: url, MSVC_API_KEY: tenant.key };
    const noPhone = join(dir, 'nophone.csv');
    writeFileSync(noPhone, 'Name,Email\nAna,a@example.com\n');
    const [mapping, wrongKey] = await Promise.all([
      runCli(['contacts', 'import', noPhone], env),
      runCli(['contacts', 'import', csvFile(dir, 'k.csv', 3, {}).path], { MSVC_URL: url, MSVC_API_KEY: `svc_sk_live_${'0'.repeat(40)}` }),
    ]);
    expect(mapping.code).toBe(2);
    expect(mapping.stderr).toContain('no phone column');
    expect(wrongKey.code).toBe(4);

    const file = csvFile(dir, 'changing.csv', 30, {});
    // The state of an unfinished import of this file when it was one byte long.
    writeFileSync(`${file.path}.import-state.json`, JSON.stringify({
      version: 1, import_id: 'x', file: { path: file.path, size: 1, mtime_ms: 1 }, settings: '{}', confirmed_batches: 1, confirmed_rows: 10, confirmed_bytes: 1,
      created: 10, refused: 0, refused_file: 'r', refused_file_bytes: 0, completed: false, started_at: '', updated_at: '',
    }));
    const changed = await runCli(['contacts', 'import', file.path], env);
    expect(changed.code).toBe(2);
    expect(changed.stderr).toContain('--restart');
    const restarted = await runCli(['contacts', 'import', file.path, '--restart', '--json'], env);
    expect(restarted.code, restarted.stderr).toBe(0);
    expect(JSON.parse(restarted.stdout)).toMatchObject({ rows: 30, created: 30, refused: 0, refused_file: null });
  });
});

// A waiting import is a process left waiting for the minute window (up to a minute): each run is
// stopped once it has said so, not waited out.
describe('msvc contacts import at the rate limit', { timeout: 180_000 }, () => {
  let t: TestApp;
  let url: string;
  let dir: string;
  beforeAll(async () => {
    // Three requests a minute: the fourth batch of one row has to wait for the next window.
    t = await startTestApp({ RATE_LIMIT_PER_MINUTE: '3' });
    url = await listenOnLoopback(t.app);
    dir = makeTempDir('msvc-import-wait-');
  });
  afterAll(async () => {
    await t?.close();
    removeTempDir(dir);
  });

  /** Seconds of a duration as the CLI writes it: 7s, 1m 05s, 2h 03m. */
  const seconds = (text: string) => [...text.matchAll(/(\d+)([hms])/g)].reduce((sum, [, n, unit]) => sum + Number(n) * { h: 3600, m: 60, s: 1 }[unit as 'h' | 'm' | 's'], 0);
  const WAITING = /waiting (\d+)s for the rate limit \((429 Retry-After|X-RateLimit-Remaining-Minute 0)\)/;
  const args = (file: string) => ['contacts', 'import', file, '--batch-size', '1', '--concurrency', '1'];

  it('says on stderr when it waits for the rate limit, how long and why, with an ETA that counts the wait', async () => {
    const tenant = await createTenant(t.app);
    const env = { MSVC_URL: url, MSVC_API_KEY: tenant.key };
    const run = spawnCli(args(csvFile(dir, 'slow.csv', 8, {}).path), env);
    try {
      const [, wait, , percent, eta] = await run.waitFor(new RegExp(`^msvc: ${WAITING.source}; (\\d+)% imported, ETA ([\\dhms ]+)$`, 'm'), 'stderr', 60_000);
      expect(Number(wait)).toBeGreaterThanOrEqual(1);
      expect(Number(wait)).toBeLessThanOrEqual(61);
      expect(Number(percent)).toBeGreaterThan(0);
      expect(seconds(eta)).toBeGreaterThanOrEqual(Number(wait));
    } finally {
      run.child.kill('SIGKILL');
      await run.exited;
    }

    // The same tenant's window is spent (or, past a minute boundary, spent again after three): --json says it as JSON.
    const json = spawnCli([...args(csvFile(dir, 'slow-json.csv', 8, {}).path), '--json'], env);
    try {
      const [raw] = await json.waitFor(/^\{"waiting":.*\}$/m, 'stderr', 60_000);
      const { waiting } = JSON.parse(raw);
      expect(waiting).toMatchObject({ seconds: expect.any(Number), reason: expect.stringMatching(/^(429 Retry-After|X-RateLimit-Remaining-Minute 0)$/), until: expect.any(String) });
      expect(waiting.seconds).toBeLessThanOrEqual(61);
    } finally {
      json.child.kill('SIGKILL');
      await json.exited;
    }
  });

  it('on a terminal, the progress bar counts the wait down and its ETA is at least the wait', async () => {
    const tenant = await createTenant(t.app);
    const run = spawnCli(args(csvFile(dir, 'slow-tty.csv', 8, {}).path), { MSVC_URL: url, MSVC_API_KEY: tenant.key }, { columns: 200 });
    try {
      const [, eta, wait] = await run.waitFor(new RegExp(`ETA ([\\dhms ]+) \\| created \\d+ refused \\d+ \\| ${WAITING.source}`), 'stdout', 60_000);
      expect(seconds(eta)).toBeGreaterThanOrEqual(Number(wait));
      // Redrawn every second: the count goes down while the wait lasts.
      if (Number(wait) > 3) await run.waitFor(new RegExp(`waiting ${Number(wait) - 2}s for the rate limit`), 'stdout', 10_000);
    } finally {
      run.child.kill('SIGKILL');
      await run.exited;
    }
  });
});
