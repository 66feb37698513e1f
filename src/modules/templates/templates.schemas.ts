import { Type, type Static } from 'typebox';
import { Nullable } from '../../http/nullable.ts';
import { PageOf } from '../../http/pagination.ts';

export const CATEGORIES = ['MARKETING', 'UTILITY', 'AUTHENTICATION'] as const;

export const Template = Type.Object({
  id: Type.String(),
  template_name: Type.String(),
  language: Type.String(),
  category: Type.String(),
  status: Type.String(),
  // Additive to the spec: why the upstream rejected the template (null unless rejected).
  rejected_reason: Nullable(Type.String()),
  // Additive: Meta's quality rating (message_template_quality_update): GREEN, YELLOW, RED, or UNKNOWN until rated.
  quality_score: Type.String(),
  components: Nullable(Type.Array(Type.Object({}, { additionalProperties: true }))),
  created_at: Type.String(),
  updated_at: Nullable(Type.String()),
});
export type Template = Static<typeof Template>;

export const TemplateCreate = Type.Object({
  // Name and language patterns are checked in the service, so every problem is reported at once
  // with a message that states the rule.
  template_name: Type.String({ minLength: 1, maxLength: 255 }),
  language: Type.String({ minLength: 2, maxLength: 10 }),
  category: Type.Union(CATEGORIES.map((c) => Type.Literal(c))),
  // The component grammar (templates.grammar.ts) validates the items.
  components: Type.Array(Type.Unknown(), { maxItems: 10 }),
});
export type TemplateCreate = Static<typeof TemplateCreate>;

export const TemplatePage = PageOf(Template);
export const IdParams = Type.Object({ id: Type.String() });
