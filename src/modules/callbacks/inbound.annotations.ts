import { sql } from 'kysely';
import type { Queryable, Tx } from '../../db/database.ts';
import type { Reaction } from '../../db/schema.ts';
import type { Annotation } from './inbound.parse.ts';

/**
 * Reactions, edits and revokes change the message they name (ours or the user's) instead of being
 * messages of their own. A message we do not know (sent from elsewhere, or long gone) is left
 * alone; the message.received event still tells the tenant.
 */

/** Our ids (outbound or inbound) of the messages with these upstream ids, within the tenant. */
export async function ourMessageIds(db: Queryable, tenantId: string, upstreamIds: string[]): Promise<Map<string, string>> {
  const ids = [...new Set(upstreamIds)];
  if (ids.length === 0) return new Map();
  const [outbound, inbound] = await Promise.all([
    db.selectFrom('messages').select(['id', 'upstream_message_id']).where('tenant_id', '=', tenantId).where('upstream_message_id', 'in', ids).execute(),
    db.selectFrom('inbound_messages').select(['id', 'upstream_message_id']).where('tenant_id', '=', tenantId).where('upstream_message_id', 'in', ids)
      .where('annotates_upstream_id', 'is', null).execute(),
  ]);
  return new Map([...inbound, ...outbound].map((r) => [r.upstream_message_id!, r.id]));
}

/** The reaction list after `from` reacted with `emoji` (an empty emoji takes theirs back). */
export function react(current: Reaction[] | null, from: string | null, emoji: string, at: Date): Reaction[] {
  const others = (current ?? []).filter((r) => r.from !== from);
  return emoji === '' ? others : [...others, { emoji, from, reacted_at: at.toISOString() }];
}

/** Applies one annotation; `from` is the user who sent it (phone, else user id). */
export async function applyAnnotation(tx: Tx, tenantId: string, annotation: Annotation, from: string | null, at: Date): Promise<void> {
  const target = annotation.targetUpstreamId;
  if (annotation.kind === 'reaction') {
    // The row is locked while its reactions are read and rewritten: two reactions in flight do not lose one.
    const outbound = await tx.selectFrom('messages').select(['id', 'reactions']).where('tenant_id', '=', tenantId)
      .where('upstream_message_id', '=', target).forUpdate().executeTakeFirst();
    if (outbound) {
      await tx.updateTable('messages').set({ reactions: JSON.stringify(react(outbound.reactions, from, annotation.emoji, at)) })
        .where('tenant_id', '=', tenantId).where('id', '=', outbound.id).execute();
      return;
    }
    const inbound = await tx.selectFrom('inbound_messages').select(['id', 'reactions']).where('tenant_id', '=', tenantId)
      .where('upstream_message_id', '=', target).where('annotates_upstream_id', 'is', null).forUpdate().executeTakeFirst();
    if (inbound) {
      await tx.updateTable('inbound_messages').set({ reactions: JSON.stringify(react(inbound.reactions, from, annotation.emoji, at)) })
        .where('tenant_id', '=', tenantId).where('id', '=', inbound.id).execute();
    }
    return;
  }
  // Users edit and delete only their own messages. An edit older than the last one applied loses.
  const own = tx.updateTable('inbound_messages').where('tenant_id', '=', tenantId).where('upstream_message_id', '=', target)
    .where('annotates_upstream_id', 'is', null).where('deleted_at', 'is', null);
  if (annotation.kind === 'edit') {
    await own.set({
      text: annotation.text, edited_at: at,
      // The new content replaces the old; what it replied to stays.
      details: sql`jsonb_strip_nulls(jsonb_build_object('context', details->'context')) || ${JSON.stringify(annotation.details)}::jsonb`,
    }).where((eb) => eb.or([eb('edited_at', 'is', null), eb('edited_at', '<=', at)])).execute();
  } else {
    await own.set({
      text: null, deleted_at: at,
      details: sql`jsonb_strip_nulls(jsonb_build_object('context', details->'context'))`,
    }).execute();
  }
}
