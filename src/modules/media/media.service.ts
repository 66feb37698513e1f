import { createHash, randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import type { Db } from '../../db/database.ts';
import { AppError, notFound, validationError } from '../../http/errors.ts';
import { offsetOf, paginationFor, type PageQuery } from '../../http/pagination.ts';
import type { UpstreamAccount, UpstreamClient } from '../../upstream/types.ts';
import { upstreamFailure } from '../business-accounts/upstream-failures.ts';
import { mediaRepository as repo, type MediaRow } from './media.repository.ts';
import type { Media } from './media.schemas.ts';
import type { MediaStorage } from './media.storage.ts';
import { bareMime, contentMatches, EXTENSIONS, extensionMismatch, MAX_MEDIA_BYTES, MEDIA_RULES, MEDIA_TYPES, type MediaType } from './media.types.ts';
import { completeIdempotencyKey } from '../../http/idempotency.ts';

export function toMedia(row: MediaRow): Media {
  return {
    id: row.id, filename: row.filename, mime_type: row.mime_type, size_bytes: Number(row.size_bytes),
    sha256: row.sha256, created_at: row.created_at.toISOString(),
  };
}

/** A file written to storage but not yet recorded: recorded by `create`, or removed by `discard`. */
export interface StagedFile {
  id: string;
  key: string;
  filename: string;
  mimeType: string;
  sizeBytes: number;
  sha256: string;
  head: Buffer;
}

const isMediaType = (t: string | undefined): t is MediaType => MEDIA_TYPES.includes(t as MediaType);

export class MediaService {
  constructor(private db: Db, private storage: MediaStorage, private upstream: UpstreamClient, private upstreamTtlMs: number) {}

  /**
   * Streams an uploaded file to storage while hashing and counting it, so a 100 MB document never
   * sits in memory. `type`, when already known, tightens the size limit during the stream.
   */
  async stage(tenantId: string, file: { filename: string; mimeType: string; stream: Readable }, type?: string): Promise<StagedFile> {
    const maxBytes = isMediaType(type) ? MEDIA_RULES[type].maxBytes : MAX_MEDIA_BYTES;
    const hash = createHash('sha256');
    let size = 0;
    let head = Buffer.alloc(0);
    const tooLarge = () => validationError(`file is larger than the ${Math.round(maxBytes / 1024 / 1024)} MB allowed${isMediaType(type) ? ` for ${type}` : ''}`, ['body', 'file'], null, 'too_large');
    async function* metered(source: AsyncIterable<Buffer>) {
      for await (const chunk of source) {
        size += chunk.length;
        if (size > maxBytes) throw tooLarge();
        if (head.length < 16) head = Buffer.concat([head, chunk.subarray(0, 16 - head.length)]);
        hash.update(chunk);
        yield chunk;
      }
    }
    const id = randomUUID();
    const key = `${tenantId}/${id}`;
    await this.storage.put(key, Readable.from(metered(file.stream)));
    return { id, key, filename: file.filename, mimeType: bareMime(file.mimeType), sizeBytes: size, sha256: hash.digest('hex'), head };
  }

  async discard(staged: StagedFile): Promise<void> {
    await this.storage.delete(staged.key);
  }

  /** Validates the staged file against the declared type and records it; a refused file is removed. */
  async create(tenantId: string, input: { type: string | undefined; file: StagedFile | undefined }): Promise<Media> {
    const { type, file } = input;
    try {
      if (!file) throw validationError('a file part named "file" is required', ['body', 'file'], null, 'missing');
      if (!isMediaType(type)) throw validationError('type must be one of image, video, document', ['body', 'type'], type ?? null);
      const rules = MEDIA_RULES[type];
      if (!rules.mimeTypes.includes(file.mimeType)) {
        throw validationError(`${file.mimeType} is not an accepted ${type} type; accepted: ${rules.mimeTypes.join(', ')}`, ['body', 'file'], file.mimeType, 'mime_type');
      }
      if (file.sizeBytes === 0) throw validationError('file is empty', ['body', 'file'], file.filename, 'empty');
      if (file.sizeBytes > rules.maxBytes) {
        throw validationError(`file is larger than the ${rules.maxBytes / 1024 / 1024} MB allowed for ${type}`, ['body', 'file'], file.sizeBytes, 'too_large');
      }
      if (!contentMatches(file.mimeType, file.head)) {
        throw validationError(`file content does not look like ${file.mimeType}`, ['body', 'file'], file.filename, 'mime_type');
      }
      const extension = extensionMismatch(file.filename, file.mimeType);
      if (extension !== null) {
        throw validationError(`the file name's extension .${extension} does not fit ${file.mimeType} (expected .${EXTENSIONS[file.mimeType].join(' or .')})`,
          ['body', 'file'], file.filename, 'mime_type');
      }
    } catch (err) {
      if (file) await this.discard(file);
      throw err;
    }
    return this.db.transaction().execute(async (tx) => {
      const media = toMedia(await repo.insert(tx, {
        id: file.id, tenant_id: tenantId, media_type: type, filename: file.filename.slice(0, 255) || 'file', mime_type: file.mimeType,
        size_bytes: file.sizeBytes, sha256: file.sha256, storage_key: file.key,
      }));
      await completeIdempotencyKey(tx, media);
      return media;
    });
  }

  async list(tenantId: string, page: PageQuery) {
    const { rows, total } = await repo.list(this.db, tenantId, page.limit, offsetOf(page));
    return { data: rows.map(toMedia), pagination: paginationFor(page.page, page.limit, total) };
  }

  async get(tenantId: string, id: string): Promise<Media> {
    const row = await repo.findById(this.db, tenantId, id);
    if (!row) throw notFound('Media');
    return toMedia(row);
  }

  /** Soft delete: the record disappears from the API; the bytes are removed, history is kept. */
  async remove(tenantId: string, id: string): Promise<{ message: string }> {
    const row = await repo.softDelete(this.db, tenantId, id);
    if (!row) throw notFound('Media');
    await this.storage.delete(row.storage_key);
    return { message: 'Media deleted' };
  }

  /**
   * The upstream media id to put in a send: uploaded on first use, and again once the previous
   * upload is older than the configured lifetime or was made from another phone number (upstream
   * media ids belong to the number that uploaded them).
   */
  async upstreamIdFor(tenantId: string, id: string, account: UpstreamAccount, expectedType: MediaType): Promise<{ type: MediaType; upstreamId: string; filename: string }> {
    const row = await repo.findById(this.db, tenantId, id);
    if (!row) throw new AppError('NOT_FOUND', `Media ${id} not found`);
    // Checked before any upload: an image header cannot take a document.
    if (row.media_type !== expectedType) {
      const a = (t: string) => (t === 'image' ? `an ${t}` : `a ${t}`);
      throw validationError(`media ${id} is ${a(row.media_type)}, not ${a(expectedType)}`, ['body', 'components'], id);
    }
    const fresh = row.upstream_media_id && row.upstream_phone_number_id === account.phoneNumberId
      && row.upstream_uploaded_at && row.upstream_uploaded_at.getTime() > Date.now() - this.upstreamTtlMs;
    if (fresh) return { type: row.media_type as MediaType, upstreamId: row.upstream_media_id!, filename: row.filename };
    const bytes = await this.storage.get(row.storage_key);
    const outcome = await this.upstream.uploadMedia(account, { bytes, mimeType: row.mime_type, filename: row.filename });
    if (outcome.kind !== 'accepted') throw upstreamFailure(outcome, 'uploading media');
    await repo.recordUpstreamUpload(this.db, tenantId, id, outcome.value.id, account.phoneNumberId);
    return { type: row.media_type as MediaType, upstreamId: outcome.value.id, filename: row.filename };
  }
}
