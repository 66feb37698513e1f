import { createHash } from 'node:crypto';
import { appendFileSync, createReadStream, existsSync, statSync, truncateSync, unlinkSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { parse } from 'csv-parse';
import { stringify } from 'csv-stringify/sync';
import { CliError, EXIT } from '../exit-codes.ts';
import { ApiError, type Api } from '../http.ts';
import { buildMapping, MappingError, parseMapFlag, toContact, type Mapping } from './mapping.ts';
import { newState, readState, saveState, type ImportState } from './state.ts';

/** Spec section 8: at most 100 contacts per bulk request. */
export const MAX_BATCH = 100;

export interface ImportOptions {
  file: string;
  api: Api;
  map?: string;
  tagSeparator: string;
  delimiter: string;
  source?: string;
  batchSize: number;
  concurrency: number;
  refusedFile: string;
  stateFile: string;
  /** Forget an earlier (interrupted or finished) import of this file and start over. */
  restart: boolean;
  signal?: AbortSignal;
  onProgress?: (progress: ImportProgress) => void;
}

export interface ImportProgress {
  rows: number;
  /** Rows confirmed by this run (a resumed import started with the earlier runs' rows). */
  rowsThisRun: number;
  bytes: number;
  /** Bytes confirmed by this run. */
  bytesThisRun: number;
  totalBytes: number;
  created: number;
  refused: number;
}

export interface ImportSummary {
  file: string;
  /** Rows confirmed in all (this run and the runs it resumed). */
  rows: number;
  created: number;
  refused: number;
  /** Rows this run confirmed, and how fast. */
  rows_this_run: number;
  elapsed_ms: number;
  rows_per_second: number;
  resumed_from_row: number;
  /** Batches the service answered from its Idempotency-Key store (taken before an interruption). */
  replayed_batches: number;
  completed: boolean;
  interrupted: boolean;
  refused_file: string | null;
  state_file: string;
}

interface PendingRow { row: number; line: number; bytes: number; record: Record<string, string>; contact: Record<string, unknown> }
interface BulkAnswer { total: number; created: number; failed: number; errors: { index: number; error: string }[] }

/** A UUID-shaped Idempotency-Key per (import, batch): the same batch gets the same key on every run. */
export function batchKey(importId: string, batch: number): string {
  const hex = createHash('sha256').update(`${importId}:${batch}`).digest('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-${((parseInt(hex[16], 16) & 3) | 8).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

export async function importContacts(options: ImportOptions): Promise<ImportSummary> {
  const started = performance.now();
  const stat = statSync(options.file);
  const file = { path: options.file, size: stat.size, mtime_ms: Math.trunc(stat.mtimeMs) };
  const explicit = (() => {
    try {
      return parseMapFlag(options.map);
    } catch (err) {
      throw new CliError((err as Error).message, EXIT.USAGE);
    }
  })();
  const settings = JSON.stringify({ map: explicit, tagSeparator: options.tagSeparator, delimiter: options.delimiter, source: options.source ?? null, batchSize: options.batchSize });

  let state = options.restart ? undefined : readState(options.stateFile);
  if (state) {
    if (state.file.size !== file.size || state.file.mtime_ms !== file.mtime_ms) {
      throw new CliError(`${options.file} changed since the import recorded in ${options.stateFile}; run with --restart to import it from the start`, EXIT.USAGE);
    }
    if (state.settings !== settings) {
      throw new CliError(`the import in ${options.stateFile} ran with other options (${state.settings}); use the same ones to resume, or --restart`, EXIT.USAGE);
    }
    // Refused rows written after the last saved state belong to batches that will be answered again.
    if (existsSync(state.refused_file) && statSync(state.refused_file).size > state.refused_file_bytes) truncateSync(state.refused_file, state.refused_file_bytes);
  } else {
    state = newState(file, settings, options.refusedFile);
    if (existsSync(options.refusedFile)) unlinkSync(options.refusedFile);
    saveState(options.stateFile, state);
  }
  const resumedFromRow = state.confirmed_rows;
  const resumedFromBytes = state.confirmed_bytes;
  const summary = (interrupted: boolean): ImportSummary => {
    const elapsedMs = Math.round(performance.now() - started);
    const rowsThisRun = state.confirmed_rows - resumedFromRow;
    return {
      file: options.file, rows: state.confirmed_rows, created: state.created, refused: state.refused,
      rows_this_run: rowsThisRun, elapsed_ms: elapsedMs, rows_per_second: elapsedMs > 0 ? Math.round((rowsThisRun / elapsedMs) * 1000) : 0,
      resumed_from_row: resumedFromRow, replayed_batches: replayed, completed: state.completed, interrupted,
      refused_file: state.refused > 0 ? state.refused_file : null, state_file: options.stateFile,
    };
  };
  let replayed = 0;
  if (state.completed) return summary(false);

  const current = state;
  let headers: string[] = [];
  let mapping: Mapping | undefined;
  let mappingError: Error | undefined;
  const parser = createReadStream(options.file).pipe(parse({
    bom: true, delimiter: options.delimiter, skip_empty_lines: true, relax_column_count: true, info: true,
    columns: (header: string[]) => {
      headers = header.map((h) => h.trim());
      try {
        mapping = buildMapping(headers, explicit);
      } catch (err) {
        mappingError = err as Error;
        throw err;
      }
      return headers;
    },
  }));

  // Answers of batches that finished ahead of an earlier one wait here until the prefix reaches them.
  const answers = new Map<number, { rows: PendingRow[]; answer: BulkAnswer }>();
  const inFlight = new Set<Promise<void>>();
  let fatal: Error | undefined;
  let rowsRead = 0;

  const progress = () => options.onProgress?.({ rows: current.confirmed_rows, rowsThisRun: current.confirmed_rows - resumedFromRow, bytes: current.confirmed_bytes, bytesThisRun: current.confirmed_bytes - resumedFromBytes, totalBytes: file.size, created: current.created, refused: current.refused });
  const writeRefused = (rows: { row: PendingRow; error: string }[]) => {
    if (rows.length === 0) return;
    const lines = (current.refused_file_bytes === 0 ? stringify([['row', 'line', 'error', ...headers]]) : '')
      + stringify(rows.map(({ row, error }) => [row.row, row.line, error, ...headers.map((h) => row.record[h] ?? '')]));
    appendFileSync(current.refused_file, lines);
    current.refused_file_bytes += Buffer.byteLength(lines);
  };
  const confirmPrefix = () => {
    for (let next = answers.get(current.confirmed_batches); next; next = answers.get(current.confirmed_batches)) {
      answers.delete(current.confirmed_batches);
      writeRefused(next.answer.errors.map((e) => ({ row: next.rows[e.index], error: e.error })));
      current.created += next.answer.created;
      current.refused += next.answer.errors.length;
      const last = next.rows[next.rows.length - 1];
      current.confirmed_rows = last.row;
      current.confirmed_bytes = last.bytes;
      current.confirmed_batches += 1;
      saveState(options.stateFile, current);
    }
    progress();
  };
  const send = async (batch: number, rows: PendingRow[]) => {
    const answer = await postBatch(options.api, batchKey(current.import_id, batch), rows.map((r) => r.contact), () => { replayed += 1; });
    answers.set(batch, { rows, answer });
    confirmPrefix();
  };
  const dispatch = async (batch: number, rows: PendingRow[]) => {
    while (inFlight.size >= options.concurrency) await Promise.race(inFlight);
    if (fatal) return;
    const task: Promise<void> = send(batch, rows).catch((err) => { fatal ??= err; }).finally(() => inFlight.delete(task));
    inFlight.add(task);
  };

  let batch: PendingRow[] = [];
  let batchIndex = current.confirmed_batches;
  let interrupted = false;
  try {
    for await (const { record, info } of parser as AsyncIterable<{ record: Record<string, string>; info: { lines: number; bytes: number } }>) {
      rowsRead += 1;
      if (rowsRead <= resumedFromRow) continue;
      if (options.signal?.aborted) { interrupted = true; break; }
      if (fatal) break;
      batch.push({ row: rowsRead, line: info.lines, bytes: info.bytes, record, contact: toContact(record, mapping!, options) });
      if (batch.length === options.batchSize) {
        await dispatch(batchIndex++, batch);
        batch = [];
      }
    }
    if (!interrupted && !fatal && batch.length > 0) await dispatch(batchIndex++, batch);
  } catch (err) {
    if (mappingError) throw new CliError((mappingError as Error).message, EXIT.USAGE);
    if (!fatal) fatal = new CliError(`cannot read ${options.file}: ${(err as Error).message}`, EXIT.USAGE);
  } finally {
    parser.destroy();
  }
  if (!mapping && !fatal && !interrupted) {
    // An empty file: no header, nothing to import.
    if (rowsRead === 0 && headers.length === 0) throw new CliError(`${options.file} has no header row`, EXIT.USAGE);
  }
  await Promise.all(inFlight);
  if (fatal) throw fatal;
  // Every row read and every batch answered: complete, even when Ctrl-C came while the last ones were in flight.
  if (!interrupted) {
    current.completed = true;
    saveState(options.stateFile, current);
  }
  return summary(!current.completed);
}

/**
 * One bulk request. Network errors, 5xx and 429 are retried by the client (same key, so safe);
 * a 409 for a key whose first request is still running (the interrupted run's request, finishing
 * on the service) is waited out.
 */
async function postBatch(api: Api, key: string, contacts: Record<string, unknown>[], onReplay: () => void): Promise<BulkAnswer> {
  for (let attempt = 1; ; attempt++) {
    try {
      const res = await api.send<BulkAnswer>('POST', '/contacts/bulk', {
        body: { contacts }, headers: { 'idempotency-key': key }, retryServerErrors: true, maxAttempts: 10,
      });
      if (res.headers['idempotent-replayed'] === 'true') onReplay();
      return res.body;
    } catch (err) {
      if (err instanceof ApiError && err.status === 409 && /still being processed/i.test(err.message) && attempt < 90) {
        await sleep(1000);
        continue;
      }
      if (err instanceof ApiError && err.status === 409) {
        throw new CliError(`${err.message}: the batch differs from the one sent before under its key; run with --restart`, EXIT.REFUSED);
      }
      throw err;
    }
  }
}
