import { createHash, randomBytes } from 'node:crypto';

export const API_KEY_FORMAT = /^svc_sk_(live|test)_[0-9a-f]{40}$/;

export function generateApiKey(mode: 'live' | 'test'): { key: string; hash: string; prefix: string } {
  const key = `svc_sk_${mode}_${randomBytes(20).toString('hex')}`;
  return { key, hash: hashApiKey(key), prefix: key.slice(0, `svc_sk_${mode}_`.length + 8) };
}

export function hashApiKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}
