import { createHash, randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Client } from 'pg';
import type { Logger } from 'pino';
import type { Db } from './database.ts';

/**
 * Liveness locks use the two-int4 form of the advisory locks, whose key space does not overlap the
 * single-bigint form every other advisory lock of the service uses (migrations, webhook recovery);
 * the first int names this use ('LIVE'), the second is derived from the process id.
 */
const LIVENESS_LOCK_CLASS = 0x4c495645;
const RETAKE_DELAY_MS = 1000;
const LOG_EVERY_MS = 10_000;

/**
 * Whether a service process (API or worker) is still running, known from the database and not
 * guessed from time: every process has a random id made at start and, on PostgreSQL, holds a
 * session-level advisory lock derived from it on a dedicated connection for its whole life. The
 * server drops the lock the moment the process dies (its connection closes), so another process can
 * take over the dead one's work at once.
 */
export interface ProcessLiveness {
  /** This process's id, to stamp on work it owns (Idempotency-Keys it runs). */
  readonly processId: string;
  /** One query: does the process with this id still hold its lock? */
  isAlive(processId: string): Promise<boolean>;
  /**
   * Takes the session-level advisory lock (classId, key) on the dedicated connection, held until
   * unlock() or until the process or that connection ends: the session it was taken on, or null.
   */
  tryLock(classId: number, key: number): Promise<LivenessSession | null>;
  unlock(session: LivenessSession, classId: number, key: number): Promise<void>;
  /**
   * When this process last knew `session` alive (`performance.now()`, a monotonic clock): the start
   * of the latest round trip on it that the server answered. -Infinity once the session has ended;
   * Infinity embedded.
   */
  confirmedAt(session: LivenessSession): number;
  /** Releases the lock (ends the dedicated connection). */
  close(): Promise<void>;
}

/** One connection's life: locks taken on it end with it. */
export interface LivenessSession { readonly id: number }

/** How often the session is confirmed alive (one round trip)... */
const CONFIRM_EVERY_MS = 200;
/** ...and how long an answer may take before the connection is given up as half-open. */
const CONFIRM_TIMEOUT_MS = 2000;
/**
 * A process that stops asking (stopped, hung, its event loop blocked) loses its session, and so its
 * locks, after this long: a stopped worker cannot hold its numbers for ever. Longer than the
 * keepalive's 25 s, so a short network cut does not hand its numbers over while sends it issued
 * before the cut may still be on their way (they would land in the new owner's seconds).
 */
const IDLE_SESSION_TIMEOUT = '30s';

/** 31 bits of the id's hash: non-negative, so it reads the same as an int4 argument and as pg_locks.objid (an oid). */
export function livenessLockKey(processId: string): number {
  return createHash('sha256').update(processId).digest().readUInt32BE(0) >>> 1;
}

/**
 * Starts this process's liveness: on PostgreSQL (`databaseUrl`) takes the lock before returning
 * (or, if the database cannot be reached, keeps trying in the background and says so in the log).
 */
export async function startProcessLiveness(options: { databaseUrl: string | undefined; db: Db; logger: Logger }): Promise<ProcessLiveness> {
  if (!options.databaseUrl) return new EmbeddedLiveness();
  const liveness = new PostgresLiveness(options.databaseUrl, options.db, options.logger);
  await liveness.take();
  return liveness;
}

/** The embedded database (PGlite) serves one process: any other process id is one that has ended. */
class EmbeddedLiveness implements ProcessLiveness {
  readonly processId = randomUUID();
  private readonly session: LivenessSession = { id: 1 };
  async isAlive(processId: string): Promise<boolean> { return processId === this.processId; }
  async tryLock(): Promise<LivenessSession | null> { return this.session; }
  async unlock(): Promise<void> {}
  confirmedAt(): number { return Infinity; }
  async close(): Promise<void> {}
}

class Session implements LivenessSession {
  private static next = 1;
  readonly id = Session.next++;
  confirmedAt: number;
  asking = false;
  /** Locks taken on it (session advisory locks are re-entrant: a second take would need a second release). */
  readonly held = new Set<string>();
  constructor(readonly client: Client, since: number) { this.confirmedAt = since; }
}

class PostgresLiveness implements ProcessLiveness {
  readonly processId = randomUUID();
  private readonly key = livenessLockKey(this.processId);
  private client: Client | null = null;
  private session: Session | null = null;
  private readonly confirming = setInterval(() => void this.confirm(), CONFIRM_EVERY_MS).unref();
  private retake: NodeJS.Timeout | null = null;
  private closed = false;
  private lastLogged = 0;
  private lostSince: number | null = null;

  constructor(private url: string, private db: Db, private logger: Logger) {}

  async isAlive(processId: string): Promise<boolean> {
    if (processId === this.processId) return true;
    const { rows } = await sql<{ alive: boolean }>`SELECT EXISTS (
      SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND classid = ${LIVENESS_LOCK_CLASS} AND objid = ${livenessLockKey(processId)} AND objsubid = 2) AS alive`.execute(this.db);
    return rows[0].alive;
  }

  /** Connects and takes the lock; on any failure tries again shortly. */
  async take(): Promise<void> {
    this.retake = null;
    if (this.closed) return;
    // Loaded only here, as in openPostgres: the embedded default never needs the driver.
    const { default: pg } = await import('pg');
    const client = new pg.Client({ connectionString: this.url, keepAlive: true, keepAliveInitialDelayMillis: 10_000, connectionTimeoutMillis: 5000 });
    client.on('error', (err) => this.lost(client, err.message));
    client.on('end', () => this.lost(client, 'connection ended'));
    const since = performance.now();
    try {
      await client.connect();
      // A host that vanishes without closing its connections: the server notices within about 25 s
      // instead of the system's default two hours, and drops the lock.
      await client.query('SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3');
      // PostgreSQL 14 and later; older servers keep a stopped process's session until it ends.
      await client.query(`SET idle_session_timeout = '${IDLE_SESSION_TIMEOUT}'`).catch(() => {});
      const { rows } = await client.query<{ taken: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS taken', [LIVENESS_LOCK_CLASS, this.key]);
      // Still held by this process's previous session, which the server has not yet seen go.
      if (!rows[0].taken) throw new Error('the lock is still held by an earlier session');
      if (this.closed) throw new Error('closed meanwhile');
      this.client = client;
      this.session = new Session(client, since);
      if (this.lostSince !== null) this.logger.info({ processId: this.processId, lostMs: Date.now() - this.lostSince }, 'process liveness lock re-taken');
      this.lostSince = null;
    } catch (err) {
      client.end().catch(() => {});
      this.notHeld((err as Error).message);
    }
  }

  async tryLock(classId: number, key: number): Promise<LivenessSession | null> {
    const session = this.session;
    if (!session) return null;
    if (session.held.has(`${classId}:${key}`)) return session;
    const { rows } = await session.client.query<{ taken: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS taken', [classId, key]);
    if (!rows[0].taken || session !== this.session) return null;
    session.held.add(`${classId}:${key}`);
    return session;
  }

  async unlock(session: LivenessSession, classId: number, key: number): Promise<void> {
    if (session !== this.session || !this.session.held.delete(`${classId}:${key}`)) return;
    await this.session.client.query('SELECT pg_advisory_unlock($1, $2)', [classId, key]).catch(() => {});
  }

  confirmedAt(session: LivenessSession): number {
    return session === this.session ? this.session.confirmedAt : -Infinity;
  }

  /**
   * One round trip on the session at a time; an answer confirms it alive as of the question. No
   * answer in time: the connection is taken for half-open and given up (a new session follows).
   */
  private async confirm(): Promise<void> {
    const session = this.session;
    if (!session || session.asking) return;
    session.asking = true;
    const asked = performance.now();
    const giveUp = setTimeout(() => this.lost(session.client, `no answer on the liveness connection within ${CONFIRM_TIMEOUT_MS} ms`), CONFIRM_TIMEOUT_MS);
    try {
      await session.client.query('SELECT 1');
      session.confirmedAt = Math.max(session.confirmedAt, asked);
    } catch {
      // The connection's own error or end handler ends the session.
    } finally {
      clearTimeout(giveUp);
      session.asking = false;
    }
  }

  private lost(client: Client, reason: string): void {
    if (client !== this.client || this.closed) return;
    this.client = null;
    this.session = null;
    client.end().catch(() => {});
    this.notHeld(reason);
  }

  /** Logs (at most every 10 s) that other processes now see this one as dead, and tries again. */
  private notHeld(reason: string): void {
    if (this.closed) return;
    this.lostSince ??= Date.now();
    if (Date.now() - this.lastLogged >= LOG_EVERY_MS) {
      this.lastLogged = Date.now();
      this.logger.warn({ processId: this.processId, reason }, 'process liveness lock not held: other processes see this one as dead (its running Idempotency-Keys may be taken over) until it is re-taken');
    }
    this.retake ??= setTimeout(() => void this.take(), RETAKE_DELAY_MS);
    this.retake.unref();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.retake) clearTimeout(this.retake);
    clearInterval(this.confirming);
    const client = this.client;
    this.client = null;
    this.session = null;
    await client?.end().catch(() => {});
  }
}
