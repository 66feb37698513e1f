import { Type, type Static } from 'typebox';
import { Nullable } from '../../http/nullable.ts';
import { PageOf, PageQuery } from '../../http/pagination.ts';

const Text = (max = 255) => Type.String({ maxLength: max });

export const Contact = Type.Object({
  id: Type.String(),
  first_name: Type.String(),
  last_name: Nullable(Type.String()),
  phone: Type.String(),
  email: Nullable(Type.String()),
  company: Nullable(Type.String()),
  job_title: Nullable(Type.String()),
  status: Nullable(Type.String()),
  tags: Type.Array(Type.String()),
  custom_fields: Type.Object({}, { additionalProperties: true }),
  source: Type.String(),
  /** Opted out of marketing templates: MARKETING campaigns skip the contact (ARCHITECTURE §4). */
  marketing_opt_out: Type.Boolean(),
  marketing_opt_out_at: Nullable(Type.String()),
  marketing_opt_out_source: Nullable(Type.Union(['user_preferences', 'keyword', 'error_131050', 'api'].map((s) => Type.Literal(s)))),
  /** The contact's IANA time zone (additive); null: campaigns' send windows use its phone number's region's. */
  time_zone: Nullable(Type.String()),
  created_at: Type.String(),
  updated_at: Nullable(Type.String()),
});
export type Contact = Static<typeof Contact>;

const Tags = Type.Array(Type.String({ minLength: 1, maxLength: 100 }), { maxItems: 100 });
const CustomFields = Type.Object({}, { additionalProperties: true });

export const ContactCreate = Type.Object({
  first_name: Type.String({ minLength: 1, maxLength: 255 }),
  phone: Type.String({ minLength: 1, maxLength: 20 }),
  last_name: Type.Optional(Nullable(Text())),
  email: Type.Optional(Nullable(Type.String({ format: 'email', maxLength: 320 }))),
  company: Type.Optional(Nullable(Text())),
  job_title: Type.Optional(Nullable(Text())),
  status: Type.Optional(Nullable(Text(64))),
  tags: Type.Optional(Tags),
  custom_fields: Type.Optional(CustomFields),
  source: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  /** IANA time zone name (e.g. Europe/Berlin); campaigns' send windows are read in it. */
  time_zone: Type.Optional(Nullable(Type.String({ minLength: 1, maxLength: 64 }))),
});
export type ContactCreate = Static<typeof ContactCreate>;

export const ContactPatch = Type.Object({
  first_name: Type.Optional(Type.String({ minLength: 1, maxLength: 255 })),
  phone: Type.Optional(Type.String({ minLength: 1, maxLength: 20 })),
  last_name: Type.Optional(Nullable(Text())),
  email: Type.Optional(Nullable(Type.String({ format: 'email', maxLength: 320 }))),
  company: Type.Optional(Nullable(Text())),
  job_title: Type.Optional(Nullable(Text())),
  status: Type.Optional(Nullable(Text(64))),
  tags: Type.Optional(Tags),
  custom_fields: Type.Optional(CustomFields),
  /** true opts the contact out of marketing templates (source `api`), false opts it back in. */
  marketing_opt_out: Type.Optional(Type.Boolean()),
  /** IANA time zone name (e.g. Europe/Berlin); campaigns' send windows are read in it. */
  time_zone: Type.Optional(Nullable(Type.String({ minLength: 1, maxLength: 64 }))),
});
export type ContactPatch = Static<typeof ContactPatch>;

export const BulkCreate = Type.Object({
  // Items are validated one by one in the service so a bad item never fails the whole batch.
  contacts: Type.Array(Type.Unknown(), { minItems: 1, maxItems: 100 }),
});

export const BulkResult = Type.Object({
  total: Type.Integer(),
  created: Type.Integer(),
  failed: Type.Integer(),
  errors: Type.Array(Type.Object({ index: Type.Integer(), error: Type.String() })),
});
export type BulkResult = Static<typeof BulkResult>;

// Filters are compared with stored text, which can never contain U+0000 (PostgreSQL rejects it).
const Filter = (max: number) => Type.String({ maxLength: max, pattern: '^[^\\u0000]*$' });

export const ListQuery = Type.Object({
  search: Type.Optional(Filter(255)),
  status: Type.Optional(Filter(64)),
  ...PageQuery.properties,
});
export type ListQuery = Static<typeof ListQuery>;

export const SearchBody = Type.Object({
  search_term: Type.Optional(Filter(255)),
  status: Type.Optional(Filter(64)),
  tag: Type.Optional(Filter(100)),
});
export type SearchBody = Static<typeof SearchBody>;

export const ContactPage = PageOf(Contact);
export const IdParams = Type.Object({ id: Type.String() });
export const MessageResult = Type.Object({ message: Type.String() });
