import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { itOnPostgresServer, makeTempDir, removeTempDir, withEmbeddedDatabase } from './helpers/app.ts';
import { createOwnDatabase } from './helpers/own-database.ts';
import { freePort, startServer, stopServer, waitForHttp, type ServerProcess } from './helpers/process.ts';

// Real processes (`node --import tsx src/server.ts`), as a new user starts the service with a wrong
// DATABASE_URL or REDIS_URL: one line on stderr naming the variable, never a stack trace or a password.

const PASSWORD = 'pw-never-printed-7f3a';
const SECRETS_KEY = 'c'.repeat(64);

/** A URL of the test's PostgreSQL server (or a made-up one when there is none), with `change` applied. */
function databaseUrl(change: (url: URL) => void): string {
  const url = new URL(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres');
  url.password = PASSWORD;
  change(url);
  return url.toString();
}

/** Listens on `port` (refused until then) and forwards each connection to `target`. */
function forwardFrom(port: number, target: { host: string; port: number }): Promise<Server> {
  const server = createServer((client) => {
    const upstream: Socket = connect(target.port, target.host);
    const end = () => { client.destroy(); upstream.destroy(); };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
}

describe('a start with a wrong DATABASE_URL or REDIS_URL (separate processes)', () => {
  const dirs: string[] = [];
  const servers: ServerProcess[] = [];
  let ownDb: Awaited<ReturnType<typeof createOwnDatabase>>;
  beforeAll(async () => { ownDb = await createOwnDatabase('msvc_start'); });
  afterAll(async () => {
    for (const server of servers) await stopServer(server);
    await ownDb?.drop();
    for (const dir of dirs) removeTempDir(dir);
  });

  /** Starts the server on the test's database (its own one, or an embedded copy) with `env` over it. */
  async function start(env: Record<string, string>): Promise<ServerProcess & { base: string }> {
    const dir = makeTempDir('msvc-start-');
    dirs.push(dir);
    const port = await freePort();
    const server = startServer({
      DATA_DIR: withEmbeddedDatabase(dir), HOST: '127.0.0.1', PORT: String(port), SEED_DEMO: 'false', LOG_LEVEL: 'warn',
      ADMIN_TOKEN: 'adm_start_token', SECRETS_KEY, ...(ownDb.url ? { DATABASE_URL: ownDb.url } : {}), ...env,
    });
    servers.push(server);
    return { ...server, base: `http://127.0.0.1:${port}` };
  }

  /** The process exits 1 having written exactly one line, matching `line`, on stderr. */
  async function expectOneLineExit(server: ServerProcess, line: RegExp): Promise<string> {
    expect(await server.exited, server.output()).toEqual({ code: 1, signal: null });
    const lines = server.stderr().trim().split('\n');
    expect(lines, server.output()).toHaveLength(1);
    expect(lines[0]).toMatch(line);
    expect(server.output()).not.toMatch(/\n\s+at |Error:/);
    expect(server.output()).not.toContain(PASSWORD);
    return lines[0];
  }

  const waitingLines = (server: ServerProcess) => server.output().split('\n').filter((l) => l.includes('unreachable') && l.startsWith('{'));

  it('a malformed DATABASE_URL stops at once with one line naming DATABASE_URL and what is wrong, without trying to connect', { timeout: 60_000 }, async () => {
    const cases: [string, RegExp][] = [
      [`localhost:5432/app`, /^configuration error: DATABASE_URL is malformed: it is not a URL \(expected postgres:\/\/user:password@host:5432\/database\)$/],
      [`mysql://app:${PASSWORD}@127.0.0.1/app`, /^configuration error: DATABASE_URL is malformed: the scheme must be postgres:\/\/ or postgresql:\/\/, got mysql:\/\/ /],
      [`postgres://app:${PASSWORD}@127.0.0.1:54x2/app`, /^configuration error: DATABASE_URL is malformed: it does not parse as a URL \(check that the port is a number/],
    ];
    await Promise.all(cases.map(async ([url, line]) => {
      const server = await start({ DATABASE_URL: url });
      await expectOneLineExit(server, line);
      expect(waitingLines(server)).toEqual([]);
    }));
  });

  it('a malformed REDIS_URL stops with one line naming REDIS_URL (not taken for a unix socket, which turned rate limiting off)', { timeout: 60_000 }, async () => {
    const cases: [string, RegExp][] = [
      ['rediss:/oops', /^configuration error: REDIS_URL is malformed: the scheme must be redis:\/\/ or rediss:\/\/ \(expected redis:\/\/host:6379 or rediss:\/\/:password@host:6380\/0\)$/],
      [`http://:${PASSWORD}@127.0.0.1:6379`, /^configuration error: REDIS_URL is malformed: the scheme must be redis:\/\/ or rediss:\/\/, got http:\/\/ /],
      [`redis://:${PASSWORD}@/0`, /^configuration error: REDIS_URL is malformed: (a host is required|it does not parse as a URL)/],
      ['redis://127.0.0.1:6379/oops', /^configuration error: REDIS_URL is malformed: the path must be a database number such as \/0, got \/oops$/],
    ];
    await Promise.all(cases.map(async ([url, line]) => expectOneLineExit(await start({ REDIS_URL: url }), line)));
  });

  it('a database that stays unreachable (refused, or a host not found) is retried, told once per burst of attempts, then one line after DATABASE_START_TIMEOUT_MS', { timeout: 60_000 }, async () => {
    const closedPort = await freePort(); // nothing listens there
    const cases: [string, RegExp, number][] = [
      [databaseUrl((u) => { u.host = `127.0.0.1:${closedPort}`; }), new RegExp(`^DATABASE_URL: the database at 127\\.0\\.0\\.1:${closedPort} is unreachable \\(connection refused\\) and did not answer within 4000 ms \\(DATABASE_START_TIMEOUT_MS, (\\d+) attempts?\\): start it, or fix the host and port in DATABASE_URL$`), 2],
      // Offline resolvers answer "try again" (EAI_AGAIN) rather than "not found": both are retried
      // (a slow resolver may leave time for one attempt only).
      [databaseUrl((u) => { u.host = 'no-such-host.invalid:5432'; }), /^DATABASE_URL: the database at no-such-host\.invalid:5432 is unreachable \((host no-such-host\.invalid not found|getaddrinfo EAI_AGAIN no-such-host\.invalid)\) and did not answer within 4000 ms \(DATABASE_START_TIMEOUT_MS, (\d+) attempts?\)/, 1],
    ];
    await Promise.all(cases.map(async ([url, line, minAttempts]) => {
      const server = await start({ DATABASE_URL: url, DATABASE_START_TIMEOUT_MS: '4000' });
      const printed = await expectOneLineExit(server, line);
      const attempts = Number(/(\d+) attempts?\)/.exec(printed)![1]);
      expect(attempts).toBeGreaterThanOrEqual(minAttempts);
      // However many attempts, one log line: the attempts of 4 s are one burst (none when the first
      // attempt alone outlasted the window). The window is wall time, shared with the rest of the
      // start: on a loaded machine a shorter one leaves room for a single attempt.
      expect(waitingLines(server), server.output()).toHaveLength(attempts > 1 ? 1 : 0);
      if (attempts > 1) expect(waitingLines(server)[0]).toMatch(/"msg":"database at [^ ]+ unreachable \([^)]+\), 1 attempt so far; retrying for up to 4000 ms in all \(DATABASE_START_TIMEOUT_MS\)"/);
    }));
  });

  it('a signal while an unreachable database is awaited stops the process gracefully (exit 0), without waiting out DATABASE_START_TIMEOUT_MS', { timeout: 60_000 }, async () => {
    const closedPort = await freePort();
    const server = await start({ DATABASE_URL: databaseUrl((u) => { u.host = `127.0.0.1:${closedPort}`; }), DATABASE_START_TIMEOUT_MS: '600000' });
    await server.waitForOutput(/"msg":"database at [^ ]+ unreachable \(connection refused\)/, 45_000);
    server.child.kill('SIGTERM');
    expect(await server.exited, server.output()).toEqual({ code: 0, signal: null });
    expect(server.stderr()).toBe('');
  });

  itOnPostgresServer('a PostgreSQL server that refuses the role or the database')('an unknown database and a failed authentication stop at once with one line naming DATABASE_URL, without retrying', { timeout: 60_000 }, async () => {
    const server = new URL(process.env.DATABASE_URL!);
    const target = `${server.hostname.replace(/\./g, '\\.')}:${server.port || 5432}`;
    const cases: [string, RegExp][] = [
      [databaseUrl((u) => { u.pathname = '/msvc_no_such_database'; }), new RegExp(`^DATABASE_URL: unknown database at ${target} \\(database "msvc_no_such_database" does not exist\\): create it, or fix the database name in DATABASE_URL$`)],
      [databaseUrl((u) => { u.username = 'msvc_no_such_role'; }), new RegExp(`^DATABASE_URL: authentication failed at ${target} \\([^)]*msvc_no_such_role[^)]*\\): fix the user or password in DATABASE_URL$`)],
    ];
    await Promise.all(cases.map(async ([url, line]) => {
      // The default start timeout (30 s): an exit long before it, with no waiting line, is an exit without retrying.
      const server = await start({ DATABASE_URL: url });
      await expectOneLineExit(server, line);
      expect(waitingLines(server)).toEqual([]);
    }));
  });

  itOnPostgresServer('a PostgreSQL server to forward to')('a database unreachable at start that becomes reachable within DATABASE_START_TIMEOUT_MS: the start waits for it, then serves', { timeout: 120_000 }, async () => {
    const real = new URL(ownDb.url!);
    const port = await freePort();
    const url = new URL(ownDb.url!);
    url.host = `127.0.0.1:${port}`;
    const server = await start({ DATABASE_URL: url.toString(), DATABASE_START_TIMEOUT_MS: '60000' });
    // Refused (nothing listens on the port) until the server has tried and said it waits.
    await server.waitForOutput(new RegExp(`"msg":"database at 127\\.0\\.0\\.1:${port} unreachable \\(connection refused\\)`), 60_000);
    const forwarder = await forwardFrom(port, { host: real.hostname, port: Number(real.port || 5432) });
    try {
      await waitForHttp(`${server.base}/healthz`, server, 60_000);
      expect((await fetch(`${server.base}/readyz`)).status).toBe(200);
      expect(server.stderr()).toBe('');
      server.child.kill('SIGTERM');
      expect(await server.exited).toEqual({ code: 0, signal: null });
    } finally {
      await new Promise((resolve) => forwarder.close(resolve));
    }
  });

  it('a well-formed REDIS_URL nobody answers at: the service starts and serves without Redis (fail-open), with one warning naming REDIS_URL', { timeout: 120_000 }, async () => {
    const redisPort = await freePort(); // nothing listens there
    const server = await start({ REDIS_URL: `redis://:${PASSWORD}@127.0.0.1:${redisPort}` });
    await waitForHttp(`${server.base}/healthz`, server, 60_000);
    const redisLines = server.output().split('\n').filter((l) => /redis/i.test(l));
    expect(redisLines, server.output()).toHaveLength(1);
    expect(redisLines[0]).toContain(`"level":40`);
    expect(redisLines[0]).toContain(`"msg":"REDIS_URL: Redis at 127.0.0.1:${redisPort} is unavailable (connect ECONNREFUSED 127.0.0.1:${redisPort}); starting without it: rate limiting is suspended until it connects"`);
    expect(server.output()).not.toContain(PASSWORD);
    expect(server.stderr()).toBe('');
    server.child.kill('SIGTERM');
    expect(await server.exited).toEqual({ code: 0, signal: null });
  });
});
