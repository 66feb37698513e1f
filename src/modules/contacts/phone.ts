import { parsePhoneNumberFromString } from 'libphonenumber-js/max';

const E164 = /^\+[1-9][0-9]{1,14}$/;

/**
 * Why `input` is not a phone number exactly as E.164 writes it (`+<country code><number>`, digits
 * only, as spec 4.4 and section 7 require), naming `field`; null when it is one. A valid number
 * written another way (spaces, dashes, parentheses, a trunk 0) is refused too, with its E.164 form
 * as the suggestion: the API never rewrites what it was given.
 */
export function e164Problem(input: string, field: string): string | null {
  const parsed = input.trim().startsWith('+') ? parsePhoneNumberFromString(input.trim()) : undefined;
  const valid = parsed?.isValid() ? parsed.number : null;
  if (valid !== null && valid === input) return null;
  const rule = `${field} must be a phone number in E.164 format (+<country code><number>, digits only, no spaces or punctuation)`;
  if (valid !== null) return `${rule}: did you mean ${valid}?`;
  return E164.test(input) ? `${field} is not a valid phone number: ${input} does not exist in its country's numbering plan` : rule;
}

let usAreaCodes: string[] | undefined;

/**
 * The area codes of the +1 numbering plan that are the United States' (not Canada's or the
 * Caribbean's): Meta's marketing pause is on US numbers, and a set-based query tells them by the
 * three digits after +1. Worked out once from the numbering plan (about 0.2 s).
 */
export function unitedStatesAreaCodes(): string[] {
  if (!usAreaCodes) {
    usAreaCodes = [];
    for (let code = 200; code <= 999; code++) {
      if (parsePhoneNumberFromString(`+1${code}2345678`)?.country === 'US') usAreaCodes.push(String(code));
    }
  }
  return usAreaCodes;
}
