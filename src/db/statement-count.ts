import type { LogEvent } from 'kysely';

let issued = 0;

/** Statements this process has sent to the database (Kysely's query log), for the metrics and the benchmarks. */
export const statementsIssued = (): number => issued;

/** Kysely's `log` option: counts every statement executed, whether it succeeded or failed. */
export function countStatement(_event: LogEvent): void {
  issued++;
}
