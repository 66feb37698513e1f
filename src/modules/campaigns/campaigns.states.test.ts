import { describe, expect, it } from 'vitest';
import { AUDIENCE_EDITABLE, CAMPAIGN_STATUSES, canTransition, TERMINAL_STATUSES, TRANSITIONS, type CampaignAction } from './campaigns.states.ts';

/**
 * Spec 3.1 written out as the table of allowed moves, including the three the workers make
 * (start_scheduled when scheduled_at arrives, complete when no recipient is left, fail on a fatal
 * condition). Every (action, status) pair is checked, so a move allowed from one status too many or
 * too few fails here.
 */
const SPEC: Record<CampaignAction, { from: string[]; to: string; event: string }> = {
  send: { from: ['DRAFT', 'SCHEDULED'], to: 'RUNNING', event: 'campaign.started' },
  schedule: { from: ['DRAFT'], to: 'SCHEDULED', event: 'campaign.scheduled' },
  start_scheduled: { from: ['SCHEDULED'], to: 'RUNNING', event: 'campaign.started' },
  pause: { from: ['RUNNING', 'SCHEDULED'], to: 'PAUSED', event: 'campaign.paused' },
  resume: { from: ['PAUSED'], to: 'RUNNING', event: 'campaign.resumed' },
  stop: { from: ['RUNNING', 'PAUSED'], to: 'STOPPED', event: 'campaign.stopped' },
  complete: { from: ['RUNNING'], to: 'COMPLETED', event: 'campaign.completed' },
  // PAUSED: a campaign its template's pause stopped, when WhatsApp then disables the template.
  fail: { from: ['RUNNING', 'PAUSED'], to: 'FAILED', event: 'campaign.failed' },
};
const STATUSES = ['DRAFT', 'SCHEDULED', 'RUNNING', 'PAUSED', 'COMPLETED', 'STOPPED', 'FAILED'];

describe('campaign state machine (spec 3.1)', () => {
  it('has exactly the seven statuses, three of them terminal', () => {
    expect([...CAMPAIGN_STATUSES]).toEqual(STATUSES);
    expect([...TERMINAL_STATUSES]).toEqual(['COMPLETED', 'STOPPED', 'FAILED']);
    expect([...AUDIENCE_EDITABLE]).toEqual(['DRAFT', 'PAUSED']);
  });

  it('the transition table is the spec, action by action', () => {
    expect(Object.keys(TRANSITIONS).sort()).toEqual(Object.keys(SPEC).sort());
    for (const action of Object.keys(SPEC) as CampaignAction[]) expect(TRANSITIONS[action], action).toEqual(SPEC[action]);
  });

  it('canTransition allows each action from exactly its statuses, and nothing leaves a terminal status', () => {
    for (const action of Object.keys(SPEC) as CampaignAction[]) {
      for (const status of [...STATUSES, 'UNKNOWN', '']) {
        expect(canTransition(action, status), `${action} from ${status}`).toBe(SPEC[action].from.includes(status));
      }
    }
    for (const status of TERMINAL_STATUSES) {
      expect((Object.keys(SPEC) as CampaignAction[]).filter((a) => canTransition(a, status)), status).toEqual([]);
    }
  });
});
