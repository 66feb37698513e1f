import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { appendFileSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A PostgreSQL cluster of a test's own (initdb into a temporary directory, a postmaster on its own
 * address and port), for drills that need a server they can reach over their own network. initdb
 * and postgres refuse to run as root, so under root they run as the `postgres` user.
 */

/** The directory holding initdb and postgres: on PATH, else Debian's /usr/lib/postgresql/<newest>/bin. */
export function postgresBinDir(): string | undefined {
  const onPath = spawnSync('sh', ['-c', 'command -v initdb'], { encoding: 'utf8' }).stdout.trim();
  if (onPath) return join(onPath, '..');
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return undefined;
  const newest = readdirSync(root).filter((v) => existsSync(join(root, v, 'bin', 'initdb'))).sort((a, b) => Number(a) - Number(b)).at(-1);
  return newest ? join(root, newest, 'bin') : undefined;
}

function postgresUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
  return { uid: id('-u'), gid: id('-g') };
}

/** Why a cluster cannot be made here, or undefined when it can. */
export function pgClusterUnavailable(): string | undefined {
  if (!postgresBinDir()) return 'no initdb/postgres binaries (PATH or /usr/lib/postgresql/*/bin)';
  if (process.getuid?.() === 0 && spawnSync('id', ['-u', 'postgres']).status !== 0) return 'running as root and there is no postgres user to run initdb as';
  return undefined;
}

export interface PgCluster {
  /** postgres://postgres@<listen>:<port>/postgres */
  url: string;
  child: ChildProcess;
  output(): string;
  stop(): Promise<void>;
}

/**
 * initdb (trust authentication, no fsync), then a postmaster listening on `listen` only, accepting
 * connections from `allowCidr` too. Settings are for a short test: durability off, connections for
 * several service processes with their pools.
 */
export async function startPgCluster(options: { listen: string; port: number; allowCidr: string; maxConnections?: number }): Promise<PgCluster> {
  const bin = postgresBinDir()!;
  const user = postgresUser();
  const dir = mkdtempSync(join(tmpdir(), 'msvc-pgcluster-'));
  if (user) chownSync(dir, user.uid, user.gid);
  const data = join(dir, 'data');
  const asUser = user ? { uid: user.uid, gid: user.gid } : {};
  const env = { PATH: process.env.PATH ?? '', LANG: 'C', LC_ALL: 'C' };
  const init = spawnSync(join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '-A', 'trust', '--no-sync', '-E', 'UTF8'], { ...asUser, env, encoding: 'utf8', cwd: dir });
  if (init.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`initdb failed (${init.status}): ${init.stdout}${init.stderr}${init.error?.message ?? ''}`);
  }
  appendFileSync(join(data, 'pg_hba.conf'), `\nhost all all ${options.allowCidr} trust\n`);
  const child = spawn(join(bin, 'postgres'), ['-D', data, '-p', String(options.port), '-k', dir,
    '-c', `listen_addresses=${options.listen}`, '-c', `max_connections=${options.maxConnections ?? 200}`,
    '-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off', '-c', 'shared_buffers=128MB'],
  { ...asUser, env, cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (chunk) => { out += chunk; });
  child.stderr!.on('data', (chunk) => { out += chunk; });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGQUIT'); // immediate shutdown: the data goes with the directory anyway
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 30_000;
  while (!/ready to accept connections/.test(out)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(`postgres did not start:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { url: `postgres://postgres@${options.listen}:${options.port}/postgres`, child, output: () => out, stop };
}
