import { randomUUID } from 'node:crypto';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';

/**
 * What an import has confirmed, saved after every batch that joins the confirmed prefix: batches
 * 0..confirmed_batches-1 have their answers, counted and their refused rows written. A resumed
 * import starts after them and sends the next batches again with the same Idempotency-Keys, so a
 * batch the service already took answers its stored result instead of creating anything twice.
 */
export interface ImportState {
  version: 1;
  import_id: string;
  file: { path: string; size: number; mtime_ms: number };
  /** Mapping and options: a resume with different ones would send different batches. */
  settings: string;
  confirmed_batches: number;
  confirmed_rows: number;
  confirmed_bytes: number;
  created: number;
  refused: number;
  refused_file: string;
  /** Length of the refused-rows file when the state was saved (a resume cuts what came after). */
  refused_file_bytes: number;
  completed: boolean;
  started_at: string;
  updated_at: string;
}

export function newState(file: ImportState['file'], settings: string, refusedFile: string): ImportState {
  const now = new Date().toISOString();
  return {
    version: 1, import_id: randomUUID(), file, settings, confirmed_batches: 0, confirmed_rows: 0, confirmed_bytes: 0,
    created: 0, refused: 0, refused_file: refusedFile, refused_file_bytes: 0, completed: false, started_at: now, updated_at: now,
  };
}

export function readState(path: string): ImportState | undefined {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  const state = JSON.parse(text) as ImportState;
  if (state.version !== 1) throw new Error(`unknown state file version in ${path}`);
  return state;
}

/** Written to a temporary file and renamed: an interruption leaves the old state or the new one. */
export function saveState(path: string, state: ImportState): void {
  state.updated_at = new Date().toISOString();
  writeFileSync(`${path}.tmp`, `${JSON.stringify(state, null, 2)}\n`);
  renameSync(`${path}.tmp`, path);
}
