/**
 * Named pause points for crash drills. With FAULT_PAUSE=<name> (never in production) the process
 * stops at that point for good, after printing `fault point reached: <name>` to stderr, so a test
 * can SIGKILL it exactly there (for example between a write's commit and its response).
 */
const PAUSE_AT = process.env.NODE_ENV === 'production' ? undefined : process.env.FAULT_PAUSE;

export async function faultPoint(name: string): Promise<void> {
  if (PAUSE_AT !== name) return;
  process.stderr.write(`fault point reached: ${name}\n`);
  await new Promise(() => {});
}
