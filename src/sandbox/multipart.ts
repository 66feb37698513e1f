export interface FormPart {
  name: string;
  filename: string | null;
  contentType: string | null;
  data: Buffer;
}

/** Just enough multipart/form-data parsing for the media upload edge; null when malformed. */
export function parseMultipart(contentType: string | undefined, body: Buffer): FormPart[] | null {
  const match = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType ?? '');
  if (!contentType?.toLowerCase().startsWith('multipart/form-data') || !match) return null;
  const delimiter = Buffer.from(`--${match[1] ?? match[2]}`);
  const parts: FormPart[] = [];
  let position = body.indexOf(delimiter);
  if (position < 0) return null;
  for (;;) {
    position += delimiter.length;
    if (body[position] === 0x2d && body[position + 1] === 0x2d) return parts; // closing "--"
    const headersEnd = body.indexOf('\r\n\r\n', position);
    const next = body.indexOf(delimiter, position);
    if (headersEnd < 0 || next < 0 || headersEnd > next) return null;
    const headers = body.subarray(position, headersEnd).toString('utf8');
    const disposition = /content-disposition:[^\r\n]*?name="([^"]*)"(?:[^\r\n]*?filename="([^"]*)")?/i.exec(headers);
    if (!disposition) return null;
    const type = /content-type:\s*([^\r\n]+)/i.exec(headers);
    parts.push({
      name: disposition[1],
      filename: disposition[2] ?? null,
      contentType: type ? type[1].trim() : null,
      data: body.subarray(headersEnd + 4, next - 2), // the part ends with CRLF before the delimiter
    });
    position = next;
  }
}
