/**
 * Upstream error codes as the campaign API shows them (spec 4.1: `code: string`, `error_code:
 * string`): the integer's digits, or "unknown" for a failure that came without a code. They are
 * stored as integers, as Meta sends them.
 */
export const UNKNOWN_ERROR_CODE = 'unknown';

export const errorCodeText = (code: number | null): string => (code === null ? UNKNOWN_ERROR_CODE : String(code));

/**
 * The stored code a caller's value names: a number or a string of digits is that integer, "unknown"
 * is null (no code); undefined when it names no code.
 */
export function parseErrorCode(value: string | number): number | null | undefined {
  if (value === UNKNOWN_ERROR_CODE) return null;
  const text = String(value);
  return /^-?\d{1,10}$/.test(text) && Math.abs(Number(text)) <= 2_147_483_647 ? Number(text) : undefined;
}
