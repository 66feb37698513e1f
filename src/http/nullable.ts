import { Type } from 'typebox';

/**
 * A schema that also accepts null. Null comes first: under type coercion (query strings) a
 * [String, Null] union would turn null into "" instead of keeping it.
 */
export const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) => Type.Union([Type.Null(), schema]);

/** A nullable timestamp column as the API returns it. */
export const isoOrNull = (date: Date | null) => (date ? date.toISOString() : null);
