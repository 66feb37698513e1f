import { Type, type Static } from 'typebox';
import { PageOf } from '../../http/pagination.ts';

/** ARCHITECTURE §4: exactly { id, filename, mime_type, size_bytes, sha256, created_at }. */
export const Media = Type.Object({
  id: Type.String(),
  filename: Type.String(),
  mime_type: Type.String(),
  size_bytes: Type.Integer(),
  sha256: Type.String(),
  created_at: Type.String(),
});
export type Media = Static<typeof Media>;

export const MediaPage = PageOf(Media);
export const IdParams = Type.Object({ id: Type.String() });
export const MessageResult = Type.Object({ message: Type.String() });
