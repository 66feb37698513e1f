import { Type, type Static } from 'typebox';
import { Nullable } from '../../http/nullable.ts';
import { PageOf } from '../../http/pagination.ts';


export const ContactParams = Type.Object({ id: Type.String() });
export const FollowupParams = Type.Object({ id: Type.String(), followup_id: Type.String() });

/** ARCHITECTURE §4: a note is { id, contact_id, content, created_at }. */
export const Note = Type.Object({
  id: Type.String(),
  contact_id: Type.String(),
  content: Type.String(),
  created_at: Type.String(),
});
export type Note = Static<typeof Note>;
export const NoteCreate = Type.Object({ content: Type.String({ minLength: 1, maxLength: 5000 }) }, { additionalProperties: false });
export type NoteCreate = Static<typeof NoteCreate>;
export const NotePage = PageOf(Note);

export const Followup = Type.Object({
  id: Type.String(),
  contact_id: Type.String(),
  title: Type.String(),
  due_at: Type.String(),
  done: Type.Boolean(),
  notes: Nullable(Type.String()),
  created_at: Type.String(),
  updated_at: Nullable(Type.String()),
});
export type Followup = Static<typeof Followup>;

const Title = Type.String({ minLength: 1, maxLength: 255 });
const DueAt = Type.String({ format: 'date-time' });
const FollowupNotes = Nullable(Type.String({ maxLength: 5000 }));

// Unknown keys are dropped by the validator (additionalProperties false with removeAdditional).
export const FollowupCreate = Type.Object({
  title: Title,
  due_at: DueAt,
  done: Type.Optional(Type.Boolean()),
  notes: Type.Optional(FollowupNotes),
}, { additionalProperties: false });
export type FollowupCreate = Static<typeof FollowupCreate>;

export const FollowupPatch = Type.Object({
  title: Type.Optional(Title),
  due_at: Type.Optional(DueAt),
  done: Type.Optional(Type.Boolean()),
  notes: Type.Optional(FollowupNotes),
}, { additionalProperties: false });
export type FollowupPatch = Static<typeof FollowupPatch>;
export const FollowupPage = PageOf(Followup);

export const Communication = Type.Object({
  id: Type.String(),
  contact_id: Type.String(),
  direction: Type.String(),
  channel: Type.String(),
  message_id: Nullable(Type.String()),
  summary: Nullable(Type.String()),
  from_user_id: Nullable(Type.String()),
  created_at: Type.String(),
});
export const CommunicationPage = PageOf(Communication);
export const MessageResult = Type.Object({ message: Type.String() });
