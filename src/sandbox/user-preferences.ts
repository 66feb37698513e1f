import { digitsOf } from './sends-log.ts';
import { postNumberChange, type Reply, type SandboxState } from './state.ts';

const VALUES = ['stop', 'resume'] as const;
const DETAIL = { stop: 'User requested to stop marketing messages', resume: 'User requested to resume marketing messages' };

/**
 * `POST /__sandbox/user_preferences {to_phone_number_id, from?, from_user_id?, value, timestamp?}`:
 * the user taps "Stop promotions" (`stop`) or resumes them (`resume`) for that business number;
 * the sandbox posts Meta's signed `user_preferences` callback (webhook reference user_preferences).
 * `timestamp` (Unix seconds) dates it, by default now: an older one stands for a redelivery.
 * Posted even when status callbacks are switched off, since a test asked for it.
 */
export function userPreferences(state: SandboxState, body: unknown): Reply {
  const bad = (message: string): Reply => ({ status: 400, body: { error: { message } } });
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return bad('body must be a JSON object');
  const b = body as Record<string, unknown>;
  if (typeof b.to_phone_number_id !== 'string') return bad('to_phone_number_id is required');
  if (typeof b.from !== 'string' && typeof b.from_user_id !== 'string') return bad('from or from_user_id is required');
  if (!VALUES.includes(b.value as (typeof VALUES)[number])) return bad(`value must be one of ${VALUES.join(', ')}`);
  if (b.timestamp !== undefined && (typeof b.timestamp !== 'number' || !Number.isInteger(b.timestamp) || b.timestamp < 0)) return bad('timestamp must be Unix seconds');
  if (!state.config.callback_url) return { status: 409, body: { error: { message: 'no callback_url is configured' } } };
  const value = b.value as (typeof VALUES)[number];
  const waId = typeof b.from === 'string' ? digitsOf(b.from) : undefined;
  const userId = typeof b.from_user_id === 'string' ? b.from_user_id : undefined;
  const timestamp = (b.timestamp as number | undefined) ?? Math.floor(Date.now() / 1000);
  postNumberChange(state, b.to_phone_number_id, 'user_preferences', {
    contacts: [{ profile: { name: 'Sandbox User' }, wa_id: waId, user_id: userId }],
    user_preferences: [{ wa_id: waId, user_id: userId, detail: DETAIL[value], category: 'marketing_messages', value, timestamp }],
  });
  return { status: 200, body: { to_phone_number_id: b.to_phone_number_id, wa_id: waId ?? null, user_id: userId ?? null, value, timestamp } };
}
