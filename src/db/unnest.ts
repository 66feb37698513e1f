import { sql, type RawBuilder } from 'kysely';

/** One column of a batch of rows: its name, its SQL type and its value in each row. */
export type Column<R> = readonly [name: string, type: string, value: (row: R) => unknown];

/**
 * `unnest($1::type[], ...) AS alias(name, ...)`: a batch of rows as one array parameter per
 * column, for a statement to join or insert from. PostgreSQL parses and plans it in the same time
 * whatever the batch's size; a VALUES list costs a parameter and an expression per cell (measured:
 * 1.6-1.9 ms of backend CPU for a status batch of 40 rows of 22 columns, 0.6 ms unnested).
 * JSON values go in as text (`JSON.stringify`), typed `jsonb`.
 */
export function unnestRows<R>(rows: readonly R[], alias: string, columns: readonly Column<R>[]): RawBuilder<unknown> {
  const arrays = sql.join(columns.map(([, type, value]) => sql`${rows.map(value)}::${sql.raw(type)}[]`));
  return sql`unnest(${arrays}) AS ${sql.raw(alias)}(${sql.raw(columns.map(([name]) => name).join(', '))})`;
}
