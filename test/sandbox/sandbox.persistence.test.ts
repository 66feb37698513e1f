import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { StateFile } from '../../src/sandbox/state-file.ts';
import type { Sandbox } from '../../src/sandbox/sandbox.ts';
import { eventually, makeTempDir, removeTempDir } from '../helpers/app.ts';
import { freePort } from '../helpers/process.ts';
import { APP_SECRET, approvedTemplate, http, startReceiver, startTestSandbox, templateSend, uniqueId, uniquePhone, type CallbackReceiver } from './helpers.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('sandbox state file: writes coalesced', () => {
  const dir = makeTempDir('sandbox-state-');
  afterAll(() => removeTempDir(dir));

  it('writes a burst of changes a few times, not once per change, and flush writes what is pending', async () => {
    let snapshots = 0;
    let value = 0;
    const file = new StateFile(join(dir, 'burst.json'), () => { snapshots++; return { value }; }, 100);
    const started = Date.now();
    while (Date.now() - started < 350) {
      value++;
      file.schedule();
      await sleep(1);
    }
    // At once for the first change, then once per 100 ms: 4 or 5 over 350 ms, against hundreds of changes.
    expect(snapshots).toBeGreaterThanOrEqual(3);
    expect(snapshots).toBeLessThanOrEqual(5);
    value = -1;
    file.schedule();
    file.flush();
    expect(file.load()).toEqual({ value: -1 });
    const writes = snapshots;
    file.flush();
    expect(snapshots).toBe(writes); // nothing pending, nothing written
  });
});

describe('sandbox: rules and owed callbacks survive a close and a start on the same state file', () => {
  const dir = makeTempDir('sandbox-restart-');
  const stateFile = join(dir, 'sandbox-state.json');
  let receiver: CallbackReceiver;
  let sandbox: Sandbox | undefined;
  beforeAll(async () => { receiver = await startReceiver(); });
  afterAll(async () => {
    await sandbox?.close();
    await receiver.close();
    removeTempDir(dir);
  });

  const statusesOf = (id: string) => receiver.statuses().filter((s) => s.id === id).map((s) => s.status);

  it('delivers after the start what the closed sandbox still owed, and keeps applying its rules', async () => {
    const [wabaId, phoneId] = [uniqueId(), uniqueId()];
    const [plain, deferred, held, delayed, late] = [uniquePhone(), uniquePhone(), uniquePhone(), uniquePhone(), uniquePhone()];
    // The receiver is down: every callback waits for a retry a minute away.
    receiver.failNext(1_000_000, 503);
    sandbox = await startTestSandbox({ callbackUrl: receiver.url, stateFile, callbackRetryDelaysMs: [60_000] });
    const control = (path: string, body: unknown) => http('POST', `${sandbox!.url}/__sandbox${path}`, body);
    const send = (to: string, name: string) => http('POST', `${sandbox!.baseUrl}/${phoneId}/messages`, templateSend(to, name));
    await control('/phone_numbers', { phone_number_id: phoneId, waba_id: wabaId });
    const marketing = await approvedTemplate(sandbox, wabaId, undefined, undefined, 'MARKETING');
    const paused = await approvedTemplate(sandbox, wabaId, undefined, undefined, 'MARKETING');
    await control('/recipients', { to: deferred, outcome: 'defer', count: 2 });
    await control('/recipients', { to: held, outcome: 'held', hold_ms: 1000 });
    await control('/recipients', { to: delayed, outcome: 'fail', error_code: 131026, delay_ms: 1000 });
    await control('/templates/pause', { name: paused.name, language: 'en_US', unpause_after_ms: 1000 });
    await control('/inbound', { to_phone_number_id: phoneId, from: late, name: 'Late Replier', text: 'hi' });

    const plainId = (await send(plain, marketing.name)).body.messages[0].id;
    const deferredId = (await send(deferred, marketing.name)).body.messages[0].id;
    const heldId = (await send(held, marketing.name)).body.messages[0].id;
    const delayedId = (await send(delayed, marketing.name)).body.messages[0].id;
    // Posted and refused once: now waiting for their retry.
    await eventually(async () => sandbox!.state.statuses.pending() === 1 && !sandbox!.state.deliverer.idle());
    await sandbox.close();
    sandbox = undefined;

    receiver.failNext(0);
    sandbox = await startTestSandbox({ callbackUrl: receiver.url, stateFile });
    // The refused `sent` is posted again, and delivered and read follow it.
    await eventually(async () => statusesOf(plainId).length === 3);
    expect(statusesOf(plainId)).toEqual(['sent', 'delivered', 'read']);
    await eventually(async () => statusesOf(deferredId).length === 1);
    expect(receiver.statuses().find((s) => s.id === deferredId).errors[0].code).toBe(131049);
    // The held message is released and the delayed failure comes, after the start.
    await eventually(async () => statusesOf(heldId).length === 3);
    await eventually(async () => statusesOf(delayedId).length === 1);
    expect(receiver.statuses().find((s) => s.id === delayedId).errors[0].code).toBe(131026);
    // The pause ends by itself as it would have.
    await eventually(async () => receiver.received.some((r) => r.raw.includes('"UNPAUSE"') && r.raw.includes(paused.name)));
    expect((await send(uniquePhone(), paused.name)).status).toBe(200);

    // The defer rule has one send left, then sends succeed.
    const again = (await send(deferred, marketing.name)).body.messages[0].id;
    const after = (await send(deferred, marketing.name)).body.messages[0].id;
    await eventually(async () => statusesOf(again).length === 1 && statusesOf(after).length === 3);
    expect(receiver.statuses().find((s) => s.id === again).errors[0].code).toBe(131049);
    // The customer-service window and the name the user wrote with are kept too.
    const reply = await http('POST', `${sandbox.baseUrl}/${phoneId}/messages`, { messaging_product: 'whatsapp', to: late, type: 'text', text: { body: 'hello' } });
    expect(reply.status).toBe(200);
    await eventually(async () => statusesOf(reply.body.messages[0].id).length === 3);
    const value = receiver.received.map((r) => r.body.entry[0].changes[0].value).find((v) => v.statuses?.some((s: any) => s.id === reply.body.messages[0].id));
    expect(value.contacts).toEqual([{ profile: { name: 'Late Replier' }, wa_id: late.slice(1) }]);
  });
});

/** `npm run sandbox` as its own process, as the service's embedded default runs it (same state file under DATA_DIR). */
describe('sandbox process: owed callbacks across SIGTERM and SIGKILL', () => {
  const dir = makeTempDir('sandbox-process-');
  let receiver: CallbackReceiver;
  let child: ReturnType<typeof spawn> | undefined;
  beforeAll(async () => { receiver = await startReceiver(); });
  afterEach(() => { if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL'); });
  afterAll(async () => {
    await receiver.close();
    removeTempDir(dir);
  });

  async function start(port: number): Promise<{ exited: Promise<number | null> }> {
    child = spawn(process.execPath, ['--import', 'tsx', 'src/sandbox/main.ts'], {
      env: {
        PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', DATA_DIR: dir, SANDBOX_PORT: String(port),
        SANDBOX_CALLBACK_URL: receiver.url, UPSTREAM_APP_SECRET: APP_SECRET, SANDBOX_REVIEW_MS: '20', LOG_LEVEL: 'warn',
      },
      stdio: 'ignore',
    });
    const current = child;
    const exited = new Promise<number | null>((resolve) => current.once('exit', (code) => resolve(code)));
    await eventually(async () => {
      if (current.exitCode !== null) throw new Error(`sandbox exited with ${current.exitCode}`);
      return (await fetch(`http://127.0.0.1:${port}/__sandbox/health`).catch(() => null))?.status === 200;
    }, 60_000);
    return { exited };
  }

  it('a SIGTERM keeps a status queued just before it; a SIGKILL loses nothing written an interval earlier', { timeout: 120_000 }, async () => {
    const port = await freePort();
    const root = `http://127.0.0.1:${port}`;
    const base = `${root}/v21.0`;
    const [wabaId, phoneId] = [uniqueId(), uniqueId()];
    const statusesOf = (id: string) => receiver.statuses().filter((s) => s.id === id).map((s) => s.status);
    receiver.failNext(1_000_000, 503);

    let run = await start(port);
    await http('POST', `${root}/__sandbox/phone_numbers`, { phone_number_id: phoneId, waba_id: wabaId });
    const name = `restart_${uniqueId()}`;
    await http('POST', `${base}/${wabaId}/message_templates`, { name, language: 'en_US', category: 'UTILITY', components: [{ type: 'BODY', text: 'Hi {{1}}, welcome.', example: { body_text: [['Ana']] } }] });
    await http('POST', `${root}/__sandbox/templates/review`, { name, language: 'en_US', status: 'APPROVED' });
    const send = () => http('POST', `${base}/${phoneId}/messages`, templateSend(uniquePhone(), name, ['Ada']));
    const beforeKill = (await send()).body.messages[0].id;
    // Several write intervals pass, then the process is killed outright.
    await sleep(600);
    child!.kill('SIGKILL');
    await run.exited;

    run = await start(port);
    const beforeTerm = (await send()).body.messages[0].id;
    child!.kill('SIGTERM');
    expect(await run.exited).toBe(0);

    receiver.failNext(0);
    run = await start(port);
    await eventually(async () => statusesOf(beforeKill).length === 3 && statusesOf(beforeTerm).length === 3, 20_000);
    expect(statusesOf(beforeKill)).toEqual(['sent', 'delivered', 'read']);
    expect(statusesOf(beforeTerm)).toEqual(['sent', 'delivered', 'read']);
    child!.kill('SIGTERM');
    expect(await run.exited).toBe(0);
  });
});
