import { Type, type Static } from 'typebox';

const Parameter = Type.Object({ type: Type.String({ minLength: 1, maxLength: 32 }) }, { additionalProperties: true });

export const SendComponentInput = Type.Object({
  type: Type.String({ minLength: 1, maxLength: 16 }),
  sub_type: Type.Optional(Type.String({ maxLength: 32 })),
  index: Type.Optional(Type.Union([Type.String({ maxLength: 4 }), Type.Integer({ minimum: 0, maximum: 99 })])),
  parameters: Type.Optional(Type.Array(Parameter, { maxItems: 100 })),
});

export const SendTemplateMessage = Type.Object({
  to: Type.String({ minLength: 1, maxLength: 32 }),
  template_name: Type.String({ minLength: 1, maxLength: 512 }),
  language: Type.String({ minLength: 2, maxLength: 10, default: 'en' }),
  components: Type.Optional(Type.Array(SendComponentInput, { maxItems: 20 })),
});
export type SendTemplateMessage = Static<typeof SendTemplateMessage>;

export const SendResult = Type.Object({
  message_id: Type.String(),
  status: Type.Literal('accepted'),
  to: Type.String(),
});
export type SendResult = Static<typeof SendResult>;
