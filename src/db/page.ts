import type { SelectQueryBuilder } from 'kysely';

/**
 * One page of a filtered query beside the count of everything the filter matches (for the
 * pagination object). `page` adds the columns, order, limit and offset to the filtered query.
 */
export async function pageWithTotal<DB, TB extends keyof DB, O>(
  filtered: SelectQueryBuilder<DB, TB, {}>,
  page: (query: SelectQueryBuilder<DB, TB, {}>) => SelectQueryBuilder<DB, TB, O>,
): Promise<{ rows: O[]; total: number }> {
  const [rows, count] = await Promise.all([
    page(filtered).execute(),
    filtered.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow(),
  ]);
  return { rows, total: Number((count as { n: number }).n) };
}
