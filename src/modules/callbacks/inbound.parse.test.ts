import { describe, expect, it } from 'vitest';
import { react } from './inbound.annotations.ts';
import { toInbound, type RawInbound } from './inbound.parse.ts';

const parse = (m: Partial<RawInbound>) => toInbound({ id: 'wamid.X', from: '14155550100', timestamp: '1700000000', ...m } as RawInbound, [])!;

describe('inbound message parsing', () => {
  it('reads each type into its fields and its text', () => {
    expect(parse({ type: 'text', text: { body: 'hi' } })).toMatchObject({ type: 'text', text: 'hi', details: {}, annotation: null, contextUpstreamId: null });
    expect(parse({ type: 'button', button: { text: 'Stop', payload: 'P' } })).toMatchObject({ text: 'Stop', details: { button: { payload: 'P', text: 'Stop' } } });
    expect(parse({ type: 'interactive', interactive: { type: 'list_reply', list_reply: { id: 'r', title: 'T', description: 'D' } } }).details)
      .toEqual({ interactive: { type: 'list_reply', id: 'r', title: 'T', description: 'D' } });
    expect(parse({ type: 'sticker', sticker: { id: '77', mime_type: 'image/webp', sha256: 'abc', animated: false } }).details)
      .toEqual({ media: { id: '77', mime_type: 'image/webp', sha256: 'abc', caption: null, filename: null } });
    expect(parse({ type: 'location', location: { latitude: '1.5' as never, longitude: 2 } }).details.location).toMatchObject({ latitude: 1.5, longitude: 2, name: null });
    expect(parse({ type: 'order', order: { catalog_id: 'c', product_items: 'junk' as never } }).details.order).toEqual({ catalog_id: 'c', text: null, product_items: [] });
  });

  it('keeps only the referral\'s scalar fields and the context id', () => {
    const m = parse({ type: 'text', text: { body: 'ad' }, context: { id: 'wamid.OURS' }, referral: { ctwa_clid: 'C1', headline: 'H', nested: { x: 1 } } });
    expect(m.contextUpstreamId).toBe('wamid.OURS');
    expect(m.details.referral).toEqual({ ctwa_clid: 'C1', headline: 'H' });
  });

  it('turns reactions, edits and revokes into annotations of the message they name', () => {
    expect(parse({ type: 'reaction', reaction: { message_id: 'wamid.T', emoji: '👍' } }).annotation).toEqual({ kind: 'reaction', targetUpstreamId: 'wamid.T', emoji: '👍' });
    expect(parse({ type: 'reaction', reaction: { message_id: 'wamid.T' } }).annotation).toEqual({ kind: 'reaction', targetUpstreamId: 'wamid.T', emoji: '' });
    expect(parse({ type: 'edit', edit: { original_message_id: 'wamid.T', message: { type: 'image', image: { id: '5', caption: 'new' } } } }).annotation)
      .toEqual({ kind: 'edit', targetUpstreamId: 'wamid.T', text: 'new', details: { media: { id: '5', mime_type: null, sha256: null, caption: 'new', filename: null } } });
    expect(parse({ type: 'revoke', revoke: { original_message_id: 'wamid.T' } }).annotation).toEqual({ kind: 'revoke', targetUpstreamId: 'wamid.T' });
    // Without a target there is nothing to annotate: it stays a message of its own type.
    expect(parse({ type: 'reaction', reaction: {} }).annotation).toBeNull();
  });

  it('keeps one reaction per user; an empty emoji takes it back', () => {
    const at = new Date('2026-01-01T00:00:00Z');
    const one = react(null, '+1', '👍', at);
    const two = react(one, '+2', '🎉', at);
    expect(react(two, '+1', '❤️', at).map((r) => [r.from, r.emoji])).toEqual([['+2', '🎉'], ['+1', '❤️']]);
    expect(react(two, '+1', '', at).map((r) => r.from)).toEqual(['+2']);
  });
});
