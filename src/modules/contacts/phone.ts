import { parsePhoneNumberFromString } from 'libphonenumber-js/max';

/** Normalises an international phone number to E.164, or null when it is not a valid number. */
export function toE164(input: string): string | null {
  const trimmed = input.trim();
  if (!trimmed.startsWith('+')) return null; // without a country code the number is ambiguous
  const parsed = parsePhoneNumberFromString(trimmed);
  return parsed && parsed.isValid() ? parsed.number : null;
}
