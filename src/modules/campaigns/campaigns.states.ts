import type { EventType } from '../../events/events.ts';

/** Spec 3.1: the campaign lifecycle as one table. The service, the dispatcher and the tests read it. */
export const CAMPAIGN_STATUSES = ['DRAFT', 'SCHEDULED', 'RUNNING', 'PAUSED', 'COMPLETED', 'STOPPED', 'FAILED'] as const;
export type CampaignStatus = (typeof CAMPAIGN_STATUSES)[number];

export const TERMINAL_STATUSES: readonly CampaignStatus[] = ['COMPLETED', 'STOPPED', 'FAILED'];

export type CampaignAction = 'send' | 'schedule' | 'start_scheduled' | 'pause' | 'resume' | 'stop' | 'complete' | 'fail';

export interface Transition {
  from: readonly CampaignStatus[];
  to: CampaignStatus;
  event: EventType;
}

export const TRANSITIONS: Record<CampaignAction, Transition> = {
  send: { from: ['DRAFT', 'SCHEDULED'], to: 'RUNNING', event: 'campaign.started' },
  schedule: { from: ['DRAFT'], to: 'SCHEDULED', event: 'campaign.scheduled' },
  // The scheduler's own move when scheduled_at arrives.
  start_scheduled: { from: ['SCHEDULED'], to: 'RUNNING', event: 'campaign.started' },
  pause: { from: ['RUNNING', 'SCHEDULED'], to: 'PAUSED', event: 'campaign.paused' },
  resume: { from: ['PAUSED'], to: 'RUNNING', event: 'campaign.resumed' },
  stop: { from: ['RUNNING', 'PAUSED'], to: 'STOPPED', event: 'campaign.stopped' },
  complete: { from: ['RUNNING'], to: 'COMPLETED', event: 'campaign.completed' },
  // PAUSED: a campaign its template's pause stopped, when the template is then disabled.
  fail: { from: ['RUNNING', 'PAUSED'], to: 'FAILED', event: 'campaign.failed' },
};

/** Statuses in which the audience may be replaced. */
export const AUDIENCE_EDITABLE: readonly CampaignStatus[] = ['DRAFT', 'PAUSED'];

export function canTransition(action: CampaignAction, from: string): boolean {
  return (TRANSITIONS[action].from as readonly string[]).includes(from);
}
