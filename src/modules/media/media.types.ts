/**
 * Media the upstream accepts in template headers (reference §6): type, MIME types and size limits.
 * Magic bytes are checked where the format has them, and a file name's extension must fit the MIME
 * type, because a MIME/content or MIME/extension mismatch only fails later, at send time (upstream
 * error 131053), when a campaign is already under way.
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

// Office documents: the legacy formats are OLE2 compound files, the current ones ZIP packages.
const isOle = (h: Buffer) => h.subarray(0, 8).equals(Buffer.from([0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1]));
const isZip = (h: Buffer) => h.subarray(0, 4).equals(Buffer.from([0x50, 0x4b, 0x03, 0x04]));

const MAGIC: Record<string, (head: Buffer) => boolean> = {
  'image/jpeg': (h) => h.length >= 3 && h[0] === 0xff && h[1] === 0xd8 && h[2] === 0xff,
  'image/png': (h) => h.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])),
  'application/pdf': (h) => h.subarray(0, 5).toString('latin1') === '%PDF-',
  'video/mp4': (h) => h.subarray(4, 8).toString('latin1') === 'ftyp',
  'video/3gpp': (h) => h.subarray(4, 8).toString('latin1') === 'ftyp',
  'application/msword': isOle,
  'application/vnd.ms-excel': isOle,
  'application/vnd.ms-powerpoint': isOle,
  'application/vnd.openxmlformats-officedocument.wordprocessingml.document': isZip,
  'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet': isZip,
  'application/vnd.openxmlformats-officedocument.presentationml.presentation': isZip,
  // Text has no signature, but a NUL byte near the start says it is binary.
  'text/plain': (h) => !h.includes(0),
};

/** File name extensions of each accepted MIME type. */
export const EXTENSIONS: Record<string, string[]> = {
  'image/jpeg': ['jpg', 'jpeg'],
  'image/png': ['png'],
  'video/mp4': ['mp4'],
  'video/3gpp': ['3gp', '3gpp'],
  'text/plain': ['txt'],
  'application/pdf': ['pdf'],
  'application/msword': ['doc'],
  'application/vnd.openxmlformats-officedocument.wordprocessingml.document': ['docx'],
  'application/vnd.ms-excel': ['xls'],
  'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet': ['xlsx'],
  'application/vnd.ms-powerpoint': ['ppt'],
  'application/vnd.openxmlformats-officedocument.presentationml.presentation': ['pptx'],
};

/** The file name's extension when it does not fit the MIME type (e.g. "a.pdf" sent as image/png), else null. */
export function extensionMismatch(filename: string, mimeType: string): string | null {
  const dot = filename.lastIndexOf('.');
  if (dot <= 0 || dot === filename.length - 1) return null; // no extension: the MIME type alone says what it is
  const extension = filename.slice(dot + 1).toLowerCase();
  return (EXTENSIONS[mimeType] ?? []).includes(extension) ? null : extension;
}

/** Whether the first bytes of the file match its declared MIME type (true when the format has no signature). */
export function contentMatches(mimeType: string, head: Buffer): boolean {
  const check = MAGIC[mimeType];
  return check ? check(head) : true;
}

/** The bare MIME type (no parameters), lower-cased. */
export function bareMime(mimeType: string): string {
  return mimeType.split(';')[0].trim().toLowerCase();
}
