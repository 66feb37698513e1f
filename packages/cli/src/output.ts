import Table from 'cli-table3';

export interface Column<T> {
  header: string;
  value: (row: T) => unknown;
}

const cell = (value: unknown): string => {
  if (value === null || value === undefined) return '';
  if (Array.isArray(value)) return value.join(', ');
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
};

/** A readable table of `rows` (stdout). */
export function renderTable<T>(rows: T[], columns: Column<T>[]): string {
  const table = new Table({ head: columns.map((c) => c.header), style: { head: [], border: [] } });
  for (const row of rows) table.push(columns.map((c) => cell(c.value(row))));
  return table.toString();
}

/** One record as `key  value` lines. */
export function renderRecord(record: Record<string, unknown>): string {
  const table = new Table({ style: { head: [], border: [] } });
  for (const [key, value] of Object.entries(record)) table.push({ [key]: cell(value) });
  return table.toString();
}

/** JSON for scripts (--json) or the readable form otherwise. */
export function emit(json: boolean, data: unknown, readable: () => string): void {
  process.stdout.write(json ? `${JSON.stringify(data, null, 2)}\n` : `${readable()}\n`);
}
