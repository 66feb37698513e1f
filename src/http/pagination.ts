import { Type, type Static } from 'typebox';

// page has an upper bound so that (page - 1) * limit always fits PostgreSQL's bigint OFFSET;
// a larger page is out of range (400) rather than a database error (500).
export const MAX_PAGE = 1_000_000_000;

export const PageQuery = Type.Object({
  page: Type.Integer({ minimum: 1, maximum: MAX_PAGE, default: 1, description: 'Page number, from 1.' }),
  limit: Type.Integer({ minimum: 1, maximum: 100, default: 20, description: 'Items per page.' }),
});
export type PageQuery = Static<typeof PageQuery>;

export const Pagination = Type.Object({
  page: Type.Integer(),
  limit: Type.Integer(),
  total_items: Type.Integer(),
  total_pages: Type.Integer(),
  has_next: Type.Boolean(),
  has_prev: Type.Boolean(),
});
export type Pagination = Static<typeof Pagination>;

export function paginationFor(page: number, limit: number, totalItems: number): Pagination {
  const totalPages = Math.ceil(totalItems / limit);
  return { page, limit, total_items: totalItems, total_pages: totalPages, has_next: page < totalPages, has_prev: page > 1 };
}

export const offsetOf = (q: PageQuery) => (q.page - 1) * q.limit;

/** Response schema of a paginated list of `item`. */
export const PageOf = <T extends Parameters<typeof Type.Array>[0]>(item: T) => Type.Object({ data: Type.Array(item), pagination: Pagination });
