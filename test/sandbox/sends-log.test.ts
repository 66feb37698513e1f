import { describe, expect, it } from 'vitest';
import { SendsLog, type LoggedSend } from '../../src/sandbox/sends-log.ts';

const send = (n: number, to: string): LoggedSend => ({
  message_id: `wamid.${n}`, to, template: 'tpl', language: 'en', components: [{ type: 'body', parameters: [{ type: 'text', text: `v${n}` }] }],
  biz_opaque_callback_data: n % 2 ? `cb${n}` : null, at: new Date(1_700_000_000_000 + n).toISOString(), phone_number_id: '1099', from: n % 2 ? '10.0.0.11' : null,
});

describe('sandbox sends log', () => {
  it('gives back every send as it was, oldest first, and finds a recipient by digits', () => {
    const log = new SendsLog(10);
    const sent = [send(1, '+14155550101'), send(2, '14155550102'), send(3, '+1 415 555 0101')];
    for (const s of sent) log.add(s);
    expect(log.list()).toEqual(sent);
    expect(log.list('14155550101').map((s) => s.message_id)).toEqual(['wamid.1', 'wamid.3']);
    expect(log.list('+1 (415) 555-0102')).toEqual([sent[1]]);
    expect(log.list('+19999999999')).toEqual([]);
    expect(log.list('')).toEqual(sent); // `?to=` with nothing after it lists every send, as no `to` does
    expect(log.size).toBe(3);
  });

  it('keeps the newest `capacity` sends once full, still oldest first; clear empties it', () => {
    const log = new SendsLog(3);
    for (let n = 1; n <= 7; n++) log.add(send(n, n % 2 ? '+111' : '+222'));
    expect(log.list().map((s) => s.message_id)).toEqual(['wamid.5', 'wamid.6', 'wamid.7']);
    expect(log.list('+111').map((s) => s.message_id)).toEqual(['wamid.5', 'wamid.7']);
    expect(log.size).toBe(3);
    log.add(send(8, '+222'));
    expect(log.list().map((s) => s.message_id)).toEqual(['wamid.6', 'wamid.7', 'wamid.8']);
    log.clear();
    expect(log.list()).toEqual([]);
    log.add(send(9, '+111'));
    expect(log.list().map((s) => s.message_id)).toEqual(['wamid.9']);
  });
});
