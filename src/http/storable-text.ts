import { validationError } from './errors.ts';

/** Deeper JSON than any resource needs; checking first keeps every recursive walk of a body safe. */
export const MAX_JSON_DEPTH = 64;

/** Whether `value` nests objects and arrays deeper than `max` levels (iterative: safe on any input). */
export function nestsDeeperThan(value: unknown, max = MAX_JSON_DEPTH): boolean {
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [item, depth] = stack.pop()!;
    if (item === null || typeof item !== 'object') continue;
    if (depth > max) return true;
    for (const child of Object.values(item)) if (child !== null && typeof child === 'object') stack.push([child, depth + 1]);
  }
  return false;
}

/**
 * PostgreSQL text and jsonb cannot hold U+0000, and jsonb refuses an unpaired UTF-16 surrogate
 * (text would silently store U+FFFD instead). Finding them first makes them a 400, not a 500.
 */
function flaw(text: string): string | null {
  if (text.includes('\u0000')) return 'must not contain the NUL character';
  if (!text.isWellFormed()) return 'must be valid Unicode text (it holds an unpaired surrogate)';
  return null;
}

/** The first string (or object key) in `value` that cannot be stored, with the reason. */
export function unstorableText(value: unknown, path: (string | number)[]): { path: (string | number)[]; reason: string } | null {
  if (typeof value === 'string') {
    const reason = flaw(value);
    return reason ? { path, reason } : null;
  }
  if (Array.isArray(value)) {
    for (const [i, item] of value.entries()) {
      const found = unstorableText(item, [...path, i]);
      if (found) return found;
    }
  } else if (value !== null && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) {
      const reason = flaw(key);
      const found = reason ? { path: [...path, key], reason } : unstorableText(item, [...path, key]);
      if (found) return found;
    }
  }
  return null;
}

/** A 400 naming the field (`loc` starts with the request part, e.g. 'body'). */
export function assertStorableText(input: unknown, loc: (string | number)[]): void {
  const found = unstorableText(input, loc);
  if (found) throw validationError(`${found.path.slice(1).join('.')} ${found.reason}`, found.path, null);
}

/**
 * For data we must accept rather than refuse (the upstream's callbacks): the same value with NUL
 * characters dropped and unpaired surrogates replaced, in strings and object keys alike.
 */
export function storable<T>(value: T): T {
  // Nearly every callback is clean: it is checked without copying, and only a flawed one is rebuilt.
  return needsRepair(value) ? repaired(value) : value;
}

function needsRepair(value: unknown): boolean {
  if (typeof value === 'string') return flaw(value) !== null;
  if (Array.isArray(value)) return value.some(needsRepair);
  if (value !== null && typeof value === 'object') {
    for (const key of Object.keys(value)) if (flaw(key) !== null || needsRepair((value as Record<string, unknown>)[key])) return true;
  }
  return false;
}

function repaired<T>(value: T): T {
  if (typeof value === 'string') return value.replaceAll('\u0000', '').toWellFormed() as T;
  if (Array.isArray(value)) return value.map(repaired) as T;
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [repaired(k), repaired(v)])) as T;
  }
  return value;
}
