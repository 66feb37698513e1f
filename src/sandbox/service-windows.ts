import type { StatusContact } from './statuses.ts';

/** Reference §8: free-form messages only within 24 h of the user's last inbound message. */
export const SERVICE_WINDOW_MS = 24 * 3_600_000;
const DEFAULT_PROFILE_NAME = 'Sandbox User';

interface LastInbound {
  at: number;
  name: string;
  userId?: string;
}

/**
 * Customer-service windows per business phone number and user: opened by each inbound message
 * (`POST /__sandbox/inbound`), and what the sandbox knows of the user for `contacts[]`.
 */
export class ServiceWindows {
  private readonly last = new Map<string, LastInbound>();

  constructor(private readonly onChange: () => void = () => {}) {}

  private static key(phoneNumberId: string, recipientId: string): string {
    return `${phoneNumberId}\u0000${recipientId}`;
  }

  opened(phoneNumberId: string, recipientId: string, name: string | undefined, userId: string | undefined, at = Date.now()): void {
    this.last.set(ServiceWindows.key(phoneNumberId, recipientId), { at, name: name ?? DEFAULT_PROFILE_NAME, userId });
    this.onChange();
  }

  isOpen(phoneNumberId: string, recipientId: string, windowMs: number, now = Date.now()): boolean {
    const last = this.last.get(ServiceWindows.key(phoneNumberId, recipientId));
    return last !== undefined && now - last.at < windowMs;
  }

  /** Meta's `contacts[]` entry for this user as this phone number knows them. */
  contactOf(phoneNumberId: string, recipientId: string): StatusContact {
    const last = this.last.get(ServiceWindows.key(phoneNumberId, recipientId));
    const contact: StatusContact = { profile: { name: last?.name ?? DEFAULT_PROFILE_NAME }, wa_id: recipientId };
    if (last?.userId) contact.user_id = last.userId;
    return contact;
  }

  clear(): void {
    this.last.clear();
    this.onChange();
  }

  /** Windows that may still be open; older ones are left out, so the file does not grow for ever. */
  snapshot(now = Date.now()): [string, LastInbound][] {
    return [...this.last].filter(([, last]) => now - last.at < SERVICE_WINDOW_MS);
  }

  restore(saved: [string, LastInbound][]): void {
    for (const [key, last] of saved) this.last.set(key, last);
  }
}
