import { randomUUID } from 'node:crypto';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { livenessLockKey, startProcessLiveness, type ProcessLiveness } from '../src/db/process-liveness.ts';
import { eventually, hasPostgres, itOnPostgresServer, startTestApp, type TestApp } from './helpers/app.ts';

/**
 * Process liveness (src/db/process-liveness.ts): a process is alive while it holds its advisory
 * lock (PostgreSQL), or while it is this very process (the embedded database serves one). Here
 * "another process" is a second liveness in this test process, on its own connection, exactly as a
 * second service process would hold it.
 */
describe('process liveness', () => {
  let t: TestApp;
  beforeAll(async () => { t = await startTestApp(); });
  afterAll(async () => { await t?.close(); });

  const startOther = (logLines: string[] = []) => startProcessLiveness({
    databaseUrl: t.config.databaseUrl, db: t.deps.db, logger: pino({ level: 'info' }, { write: (line: string) => { logLines.push(line); } }),
  });

  it('this process is alive; a process id nobody holds is not', async () => {
    const own = t.deps.liveness;
    expect(own.processId).toMatch(/^[0-9a-f-]{36}$/);
    expect(await own.isAlive(own.processId)).toBe(true);
    expect(await own.isAlive(randomUUID())).toBe(false);
  });

  it('lock keys are non-negative 31-bit integers, stable per process id', () => {
    const id = randomUUID();
    expect(livenessLockKey(id)).toBe(livenessLockKey(id));
    for (let i = 0; i < 50; i++) {
      const key = livenessLockKey(randomUUID());
      expect(Number.isInteger(key) && key >= 0 && key < 2 ** 31).toBe(true);
    }
  });

  it.skipIf(hasPostgres)('on the embedded database every other process id is dead (a restarted process has a new one)', async () => {
    const other = await startOther();
    expect(other.processId).not.toBe(t.deps.liveness.processId);
    expect(await t.deps.liveness.isAlive(other.processId)).toBe(false);
    expect(await other.isAlive(t.deps.liveness.processId)).toBe(false);
  });

  itOnPostgresServer('another process holding its lock on the server')('another process is alive while it runs and dead the moment it ends', async () => {
    const other = await startOther();
    try {
      expect(await t.deps.liveness.isAlive(other.processId)).toBe(true);
      expect(await other.isAlive(t.deps.liveness.processId)).toBe(true);
    } finally {
      await other.close();
    }
    expect(await t.deps.liveness.isAlive(other.processId)).toBe(false);
  });

  itOnPostgresServer('SIGSTOP of a server backend on this machine')('a session whose server stops answering is given up after 2 s (half-open), not confirmed meanwhile, and a new one follows once the server lets the old go', async () => {
    let other: ProcessLiveness | undefined;
    const admin = new pg.Client({ connectionString: t.config.databaseUrl });
    await admin.connect();
    let stopped: number | undefined;
    try {
      other = await startOther();
      const session = await other.tryLock(0x54455354, 1);
      expect(session).not.toBeNull();
      const [{ pid }] = (await admin.query<{ pid: number }>(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND objid = $1", [livenessLockKey(other.processId)])).rows;
      await eventually(async () => other!.confirmedAt(session!) > performance.now() - 500, 2000, 20);
      // The backend stops answering, as a half-open connection does; the process cannot tell otherwise.
      process.kill(pid, 'SIGSTOP');
      stopped = pid;
      const stoppedAt = performance.now();
      await eventually(async () => other!.confirmedAt(session!) === -Infinity, 5000, 20);
      const gaveUpAfter = performance.now() - stoppedAt;
      expect(gaveUpAfter).toBeGreaterThanOrEqual(1800);
      expect(gaveUpAfter).toBeLessThan(3500);
      process.kill(pid, 'SIGCONT');
      stopped = undefined;
      // The old backend sees its connection closed and goes; a new session takes the lock again.
      await eventually(async () => (await other!.tryLock(0x54455354, 1)) !== null, 10_000, 100);
    } finally {
      if (stopped) process.kill(stopped, 'SIGCONT');
      await other?.close();
      await admin.end();
    }
  });

  itOnPostgresServer('pg_terminate_backend')('a process whose lock connection is dropped is seen dead, says so in its log, and is alive again once it re-takes the lock', async () => {
    const logLines: string[] = [];
    let other: ProcessLiveness | undefined;
    const admin = new pg.Client({ connectionString: t.config.databaseUrl });
    await admin.connect();
    try {
      other = await startOther(logLines);
      const id = other.processId;
      const holder = async () => (await admin.query<{ pid: number }>(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND objid = $1", [livenessLockKey(id)])).rows.map((r) => r.pid);
      const [pid] = await holder();
      expect(pid).toEqual(expect.any(Number));
      await admin.query('SELECT pg_terminate_backend($1)', [pid]);
      await eventually(async () => (await holder()).length === 0, 5000, 10);
      expect(await t.deps.liveness.isAlive(id)).toBe(false);
      // The connection is made again and the lock re-taken within about a second.
      await eventually(() => t.deps.liveness.isAlive(id), 5000, 50);
      expect((await holder())).not.toContain(pid);
      expect(logLines.some((line) => /process liveness lock not held/.test(line))).toBe(true);
      expect(await eventually(async () => logLines.find((line) => /process liveness lock re-taken/.test(line)), 2000)).toContain(id);
    } finally {
      await other?.close();
      await admin.end();
    }
  });
});
