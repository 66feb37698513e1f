export interface Page<T> {
  data: T[];
  pagination: { page: number; has_next: boolean };
}

/**
 * Every item of a paginated list, fetching page after page while `has_next` holds. Pages are
 * offsets: items created or deleted during the walk can shift a page boundary.
 */
export async function* paginate<T>(fetchPage: (page: number) => Promise<Page<T>>, firstPage = 1): AsyncGenerator<T, void, undefined> {
  for (let page = firstPage; ; page++) {
    const result = await fetchPage(page);
    yield* result.data;
    if (!result.pagination.has_next) return;
  }
}
