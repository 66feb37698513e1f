import Table from 'cli-table3';
import stringWidth from 'string-width';

export interface Column<T> {
  header: string;
  value: (row: T) => unknown;
  /** Narrowest this column is cut to before columns to its right are left out (default 10). */
  minWidth?: number;
}

const ELLIPSIS = '…';
// Narrower than this a cell says little: leaving a column out reads better than cutting all to a stub.
const DEFAULT_MIN_WIDTH = 10;
/** An id is useless cut: it is kept whole while anything else can give way. */
export const UUID_WIDTH = 36;

const cell = (value: unknown): string => {
  if (value === null || value === undefined) return '';
  if (Array.isArray(value)) return value.join(', ');
  if (typeof value === 'object') return JSON.stringify(value);
  // One line per row: a line break inside a cell would make the row taller, not narrower.
  return String(value).replace(/\s*\n\s*/g, ' ');
};

/** What a table of cells with these content widths measures: a border, then per column its text, a space each side and a border. */
const tableWidth = (contentWidths: number[]) => contentWidths.reduce((sum, w) => sum + w + 3, 1);

export interface ColumnFit {
  /** Content width of each column kept (the first `widths.length` columns). */
  widths: number[];
  /** How many columns on the right were left out. */
  dropped: number;
}

/**
 * Content widths that make the table at most `maxWidth` wide. The widest columns are cut first,
 * each down to its minimum; when that is not enough, columns are left out from the right (the
 * first is always kept, cut to what is left if need be). Cut cells end in an ellipsis.
 */
export function fitColumns(natural: number[], minimums: number[], maxWidth: number): ColumnFit {
  for (let kept = natural.length; kept >= 1; kept--) {
    const widths = natural.slice(0, kept);
    const floors = widths.map((w, i) => Math.min(w, minimums[i]));
    let excess = tableWidth(widths) - maxWidth;
    while (excess > 0) {
      let widest = -1;
      widths.forEach((w, i) => { if (w > floors[i] && (widest < 0 || w > widths[widest])) widest = i; });
      if (widest < 0) break;
      widths[widest] -= 1;
      excess -= 1;
    }
    if (excess <= 0) return { widths, dropped: natural.length - kept };
    if (kept === 1) return { widths: [Math.max(1, widths[0] - excess)], dropped: natural.length - 1 };
  }
  return { widths: [], dropped: natural.length };
}

/** `text` cut to `width` display columns, ending in an ellipsis when cut. */
export function clip(text: string, width: number): string {
  if (stringWidth(text) <= width) return text;
  let out = '';
  for (const ch of text) {
    if (stringWidth(out + ch) > width - 1) break;
    out += ch;
  }
  return out + ELLIPSIS;
}

/**
 * A readable table of `rows` (stdout), at most `maxWidth` columns wide: cells cut with an
 * ellipsis, and the columns that do not fit at all named under the table.
 */
export function renderTable<T>(rows: T[], columns: Column<T>[], maxWidth: number): string {
  return fittedTable(columns.map((c) => c.header), rows.map((row) => columns.map((c) => cell(c.value(row)))), columns.map((c) => c.minWidth ?? DEFAULT_MIN_WIDTH), maxWidth);
}

/** One record as `key  value` rows, at most `maxWidth` wide. */
export function renderRecord(record: Record<string, unknown>, maxWidth: number): string {
  return fittedTable(null, Object.entries(record).map(([key, value]) => [key, cell(value)]), [12, DEFAULT_MIN_WIDTH], maxWidth);
}

function fittedTable(headers: string[] | null, cells: string[][], minimums: number[], maxWidth: number): string {
  const columnCount = headers?.length ?? cells[0]?.length ?? 0;
  let columns = Array.from({ length: columnCount }, (_, i) => i);
  const naturalOf = (i: number) => Math.max(stringWidth(headers?.[i] ?? ''), ...cells.map((r) => stringWidth(r[i])));
  // Too wide: a column with nothing in any row is the first to go (its header alone says nothing).
  if (tableWidth(columns.map(naturalOf)) > maxWidth && cells.length > 0) columns = columns.filter((i) => cells.some((r) => r[i] !== ''));
  const fit = fitColumns(columns.map(naturalOf), columns.map((i) => minimums[i]), maxWidth);
  const shown = columns.slice(0, fit.widths.length);
  const table = new Table({
    ...(headers ? { head: shown.map((i) => headers[i]) } : {}),
    colWidths: fit.widths.map((w) => w + 2),
    truncate: ELLIPSIS,
    style: { head: [], border: [] },
  });
  for (const row of cells) table.push(shown.map((i) => row[i]));
  if (fit.dropped === 0) return table.toString();
  const left = headers ? columns.slice(shown.length).map((i) => headers[i]).join(', ') : `${fit.dropped} columns`;
  return `${table.toString()}\n${clip(`${ELLIPSIS} not shown: ${left} (a wider --width, or --json)`, maxWidth)}`;
}

/** An ISO time as `2025-05-01 09:30` (UTC), for a table; the full time is in --json. */
export const shortTime = (iso: string | null | undefined): string => (iso ? `${iso.slice(0, 10)} ${iso.slice(11, 16)}` : '');

/** JSON for scripts (--json, never cut) or the readable form otherwise. */
export function emit(json: boolean, data: unknown, readable: () => string): void {
  process.stdout.write(json ? `${JSON.stringify(data, null, 2)}\n` : `${readable()}\n`);
}
