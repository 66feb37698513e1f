import type { HeldFate } from './recipients.ts';
import type { AcceptedMessage } from './statuses.ts';

/** A template send answered `held_for_quality_assessment` (reference §2, template pacing), waiting for its fate. */
export interface HeldMessage {
  message: AcceptedMessage;
  templateId: string;
  then: HeldFate;
  dueAt: number;
}

/**
 * Held messages, each settled when its hold ends (or earlier through the control API): `settle`
 * is told the message and its fate, and queues its statuses (and pauses its template on a drop).
 */
export class HeldMessages {
  private readonly held = new Map<string, { entry: HeldMessage; timer: NodeJS.Timeout }>();

  constructor(private readonly settle: (entry: HeldMessage, fate: HeldFate) => void, private readonly onChange: () => void = () => {}) {}

  hold(entry: HeldMessage): void {
    const timer = setTimeout(() => this.settleWhere((e) => e === entry), Math.max(0, entry.dueAt - Date.now()));
    timer.unref();
    this.held.set(entry.message.id, { entry, timer });
    this.onChange();
  }

  /** Settles the held messages `which` picks, now, with their own fate or `fate`; returns them. */
  settleWhere(which: (entry: HeldMessage) => boolean, fate?: HeldFate): HeldMessage[] {
    const settled: HeldMessage[] = [];
    for (const [id, { entry, timer }] of this.held) {
      if (!which(entry)) continue;
      clearTimeout(timer);
      this.held.delete(id);
      settled.push(entry);
    }
    // Taken out first: settling one may pause its template, which settles the others of that template.
    for (const entry of settled) this.settle(entry, fate ?? entry.then);
    if (settled.length > 0) this.onChange();
    return settled;
  }

  list(): HeldMessage[] {
    return [...this.held.values()].map(({ entry }) => entry);
  }

  snapshot(): HeldMessage[] {
    return this.list();
  }

  restore(saved: HeldMessage[]): void {
    for (const entry of saved) this.hold(entry);
  }

  /** Stops the timers; the held messages stay readable through `snapshot`. */
  close(): void {
    for (const { timer } of this.held.values()) clearTimeout(timer);
  }
}
