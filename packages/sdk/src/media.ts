import { openAsBlob } from 'node:fs';
import { basename, extname } from 'node:path';

/** What `media.upload` accepts: a file path, bytes, a Blob, or a stream (Node or web) of bytes. */
export type MediaSource = string | Uint8Array | Blob | AsyncIterable<Uint8Array>;

export interface MediaUploadInput {
  file: MediaSource;
  /** Defaults to the path's file name; required with bytes and streams. */
  filename?: string;
  /** Defaults to the MIME type of the filename's extension. */
  contentType?: string;
  /** image, video or document; defaults from the content type. */
  type?: 'image' | 'video' | 'document';
}

// The types the service accepts (spec 4.4 media; the upload endpoint's encoding in the OpenAPI document).
const MIME_BY_EXTENSION: Record<string, string> = {
  '.jpg': 'image/jpeg', '.jpeg': 'image/jpeg', '.png': 'image/png', '.mp4': 'video/mp4', '.3gp': 'video/3gpp',
  '.txt': 'text/plain', '.pdf': 'application/pdf', '.doc': 'application/msword', '.xls': 'application/vnd.ms-excel',
  '.ppt': 'application/vnd.ms-powerpoint',
  '.docx': 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
  '.xlsx': 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
  '.pptx': 'application/vnd.openxmlformats-officedocument.presentationml.presentation',
};

/**
 * The multipart body of POST /media. A path is read lazily from disk (a file-backed Blob); a
 * stream is collected first, because a request that may be retried needs its body more than once.
 */
export async function mediaForm(input: MediaUploadInput): Promise<FormData> {
  const filename = input.filename ?? (typeof input.file === 'string' ? basename(input.file) : undefined);
  if (!filename) throw new TypeError('media.upload: give a filename with bytes or a stream');
  const contentType = input.contentType ?? MIME_BY_EXTENSION[extname(filename).toLowerCase()];
  if (!contentType) throw new TypeError(`media.upload: give a contentType (none known for "${filename}")`);
  const type = input.type ?? (contentType.startsWith('image/') ? 'image' : contentType.startsWith('video/') ? 'video' : 'document');

  const form = new FormData();
  form.append('type', type); // first: the service checks the size limit of the type while the file streams in
  form.append('file', await toBlob(input.file, contentType), filename);
  return form;
}

async function toBlob(file: MediaSource, type: string): Promise<Blob> {
  if (typeof file === 'string') return openAsBlob(file, { type });
  if (file instanceof Blob) return file.type === type ? file : new Blob([file], { type });
  if (file instanceof Uint8Array) return new Blob([file], { type });
  const chunks: Uint8Array[] = [];
  for await (const chunk of file) chunks.push(chunk);
  return new Blob(chunks, { type });
}
