import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';

const BIN = join(import.meta.dirname, '..', '..', 'packages', 'cli', 'bin', 'msvc.mjs');

export interface CliRun {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  exited: Promise<number | null>;
  /** Waits until `stream` shows `pattern`; fails when the process ends first. */
  waitFor(pattern: RegExp, stream?: 'stdout' | 'stderr', timeoutMs?: number): Promise<RegExpMatchArray>;
}

/**
 * `msvc` as a user runs it (node on the bin, sources through tsx), with exactly `env` plus PATH and
 * HOME; MSVC_CONFIG points at no file, so a profile on this machine never leaks in. With
 * `terminal`, it runs on a pseudo-terminal of that many columns (util-linux `script`), as at a
 * shell: stdout and stderr are the terminal, and both arrive on `stdout()`.
 */
export function spawnCli(args: string[], env: Record<string, string | undefined> = {}, terminal?: { columns: number }): CliRun {
  const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
  const [command, argv] = terminal
    ? ['script', ['-qfec', `stty cols ${terminal.columns} rows 40; exec ${[process.execPath, BIN, ...args].map(quote).join(' ')}`, '/dev/null']]
    : [process.execPath, [BIN, ...args]];
  const child = spawn(command, argv, {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', MSVC_CONFIG: '/nonexistent/msvc.json', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (c) => { out += c; });
  child.stderr!.on('data', (c) => { err += c; });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child, exited, stdout: () => out, stderr: () => err,
    async waitFor(pattern, stream = 'stdout', timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const match = (stream === 'stdout' ? out : err).match(pattern);
        if (match) return match;
        if (child.exitCode !== null) throw new Error(`msvc exited (${child.exitCode}) before ${pattern}:\n${out}\n${err}`);
        if (Date.now() > deadline) throw new Error(`msvc did not print ${pattern} in time:\n${out}\n${err}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
  };
}

/** Runs `msvc` to its end. */
export async function runCli(args: string[], env: Record<string, string | undefined> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const run = spawnCli(args, env);
  const code = await run.exited;
  return { code, stdout: run.stdout(), stderr: run.stderr() };
}

/** The test app on a real port (the CLI is another process); an app already listening (startUpstreamApp) is taken as it is. */
export async function listenOnLoopback(app: FastifyInstance): Promise<string> {
  if (!app.server.listening) await app.listen({ port: 0, host: '127.0.0.1' });
  return `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
}
