/**
 * Media the upstream accepts in template headers (reference §6): type, MIME types and size limits.
 * Magic bytes are checked where the format has them, because a MIME/content mismatch only fails
 * later, at send time (upstream error 131053).
 */
export type MediaType = 'image' | 'video' | 'document';
export const MEDIA_TYPES: MediaType[] = ['image', 'video', 'document'];

const MB = 1024 * 1024;

export const MEDIA_RULES: Record<MediaType, { maxBytes: number; mimeTypes: string[] }> = {
  image: { maxBytes: 5 * MB, mimeTypes: ['image/jpeg', 'image/png'] },
  video: { maxBytes: 16 * MB, mimeTypes: ['video/mp4', 'video/3gpp'] },
  document: {
    maxBytes: 100 * MB,
    mimeTypes: [
      'text/plain', 'application/pdf',
      'application/msword', 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
      'application/vnd.ms-excel', 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
      'application/vnd.ms-powerpoint', 'application/vnd.openxmlformats-officedocument.presentationml.presentation',
    ],
  },
};

export const MAX_MEDIA_BYTES = Math.max(...Object.values(MEDIA_RULES).map((r) => r.maxBytes));

const MAGIC: Record<string, (head: Buffer) => boolean> = {
  'image/jpeg': (h) => h.length >= 3 && h[0] === 0xff && h[1] === 0xd8 && h[2] === 0xff,
  'image/png': (h) => h.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])),
  'application/pdf': (h) => h.subarray(0, 5).toString('latin1') === '%PDF-',
  'video/mp4': (h) => h.subarray(4, 8).toString('latin1') === 'ftyp',
  'video/3gpp': (h) => h.subarray(4, 8).toString('latin1') === 'ftyp',
};

/** Whether the first bytes of the file match its declared MIME type (true when the format has no signature). */
export function contentMatches(mimeType: string, head: Buffer): boolean {
  const check = MAGIC[mimeType];
  return check ? check(head) : true;
}

/** The bare MIME type (no parameters), lower-cased. */
export function bareMime(mimeType: string): string {
  return mimeType.split(';')[0].trim().toLowerCase();
}
