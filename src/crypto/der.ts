/**
 * The few DER (ASN.1) encodings an X.509 certificate is made of, enough for the development CA
 * (dev-ca.ts). Each returns one whole element: tag, length, contents.
 */

function element(tag: number, contents: Buffer): Buffer {
  const n = contents.length;
  // Lengths under 128 take one byte; longer ones say how many bytes follow (definite long form).
  const length = n < 0x80 ? Buffer.from([n])
    : n < 0x100 ? Buffer.from([0x81, n])
    : n < 0x10000 ? Buffer.from([0x82, n >> 8, n & 0xff])
    : (() => { throw new RangeError(`DER element too long (${n} bytes)`); })();
  return Buffer.concat([Buffer.from([tag]), length, contents]);
}

export const sequence = (...items: Buffer[]) => element(0x30, Buffer.concat(items));
export const set = (...items: Buffer[]) => element(0x31, Buffer.concat(items));
export const octetString = (bytes: Buffer) => element(0x04, bytes);
export const utf8String = (text: string) => element(0x0c, Buffer.from(text, 'utf8'));
export const boolean = (value: boolean) => element(0x01, Buffer.from([value ? 0xff : 0x00]));
/** An explicitly tagged element ([n] EXPLICIT: the inner element whole, in a constructed context tag). */
export const explicit = (n: number, inner: Buffer) => element(0xa0 | n, inner);
/** An implicitly tagged primitive ([n] IMPLICIT: the contents under a context tag). */
export const implicit = (n: number, contents: Buffer) => element(0x80 | n, contents);

/** A non-negative integer given as its big-endian bytes (leading zeros dropped, a zero added before a high bit). */
export function unsignedInteger(bytes: Buffer): Buffer {
  let start = 0;
  while (start < bytes.length - 1 && bytes[start] === 0) start++;
  const minimal = bytes.subarray(start);
  return element(0x02, minimal[0] & 0x80 ? Buffer.concat([Buffer.from([0]), minimal]) : minimal);
}

export const smallInteger = (value: number) => unsignedInteger(Buffer.from([value]));

/** A BIT STRING of whole bytes, or of `bits` leading bits of them (named-bit lists such as KeyUsage). */
export function bitString(bytes: Buffer, bits = bytes.length * 8): Buffer {
  return element(0x03, Buffer.concat([Buffer.from([bytes.length * 8 - bits]), bytes]));
}

export function objectIdentifier(dotted: string): Buffer {
  const [first, second, ...rest] = dotted.split('.').map(Number);
  const bytes = [40 * first + second];
  for (const arc of rest) {
    // Base 128, most significant group first, every byte but the last with its high bit set.
    const groups = [arc & 0x7f];
    for (let v = Math.floor(arc / 0x80); v > 0; v = Math.floor(v / 0x80)) groups.unshift((v & 0x7f) | 0x80);
    bytes.push(...groups);
  }
  return element(0x06, Buffer.from(bytes));
}

/** X.509 Time: UTCTime up to 2049, GeneralizedTime from 2050 (RFC 5280 4.1.2.5), to the second. */
export function time(date: Date): Buffer {
  const text = date.toISOString().replace(/\.\d{3}Z$/, 'Z').replace(/[-:T]/g, '');
  const year = date.getUTCFullYear();
  return year < 2050 ? element(0x17, Buffer.from(text.slice(2), 'ascii')) : element(0x18, Buffer.from(text, 'ascii'));
}
