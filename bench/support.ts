import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import pg from 'pg';
import { openDatabase } from '../src/db/database.ts';
import { migrate } from '../src/db/migrate.ts';
import autocannon from 'autocannon';

export function requireRealServers() {
  if (!process.env.DATABASE_URL || !process.env.REDIS_URL) {
    throw new Error('benchmarks run against real servers: set DATABASE_URL and REDIS_URL');
  }
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

/**
 * Starts an entry in its own process (so the load generator does not share its CPU time slice):
 * a `.js` entry (the compiled build `npm start` runs) with plain node, a `.ts` one through tsx.
 */
export async function startProcess(entry: string, env: Record<string, string>, readyUrl: string): Promise<ChildProcess> {
  // BENCH_PROFILE_DIR writes a CPU profile of the process under test.
  const profile = process.env.BENCH_PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROFILE_DIR}`] : [];
  const loader = entry.endsWith('.ts') ? ['--import', 'tsx'] : [];
  const child = spawn(process.execPath, [...profile, ...loader, entry], { env: { ...process.env, ...env }, stdio: ['ignore', 'inherit', 'inherit'] });
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${entry} exited with ${child.exitCode}`);
    try {
      const res = await fetch(readyUrl);
      if (res.ok) return child;
    } catch { /* not up yet */ }
    if (Date.now() > deadline) throw new Error(`${entry} did not become ready`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

export async function stopProcess(child: ChildProcess) {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
}

export interface LoadResult {
  requests_per_s: number;
  p50_ms: number;
  p99_ms: number;
  non_2xx: number;
  errors: number;
}

/** Runs autocannon; `paths` rotate per request so caches see realistic variety. */
export async function load(url: string, options: { paths: string[]; headers?: Record<string, string>; seconds: number; connections: number }): Promise<LoadResult> {
  let i = 0;
  const result = await autocannon({
    url,
    connections: options.connections,
    duration: options.seconds,
    headers: options.headers,
    requests: [{ setupRequest: (req) => ({ ...req, path: options.paths[i++ % options.paths.length] }) }],
  });
  return {
    requests_per_s: Math.round(result.requests.average),
    p50_ms: result.latency.p50,
    p99_ms: result.latency.p99,
    non_2xx: result.non2xx,
    errors: result.errors,
  };
}

/** CPU seconds (user + system) used so far by these processes. */
export function cpuSeconds(pids: number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch { /* gone */ }
  }
  return ticks / 100;
}

/** Processes whose command name is `command` (e.g. every PostgreSQL backend). */
export function pidsOf(command: string): number[] {
  return readdirSync('/proc').filter((d) => /^\d+$/.test(d)).map(Number).filter((pid) => {
    try { return readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === command; } catch { return false; }
  });
}

/** A new, migrated database on the DATABASE_URL server for one run (`prefix_<random>`), dropped by `drop`. */
export async function freshDatabase(prefix: string): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `${prefix}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const url = new URL(process.env.DATABASE_URL!);
  url.pathname = `/${name}`;
  const database = await openDatabase({ databaseUrl: url.toString(), dataDir: tmpdir(), poolSize: 1 });
  await migrate(database).finally(() => database.close());
  return { url: url.toString(), drop: async () => { await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`); await admin.end(); } };
}
