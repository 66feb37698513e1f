export interface LoggedSend {
  message_id: string;
  to: string;
  template: string | null;
  language: string | null;
  components: unknown;
  biz_opaque_callback_data: string | null;
  at: string;
  /** The number that sent it. */
  phone_number_id: string;
  /** The sending client's address (which node of a multi-host drill sent it). */
  from: string | null;
}

export const digitsOf = (phone: string) => phone.replace(/\D/g, '');

/**
 * Every accepted send, newest last, in a ring so a long benchmark cannot exhaust memory. Each send
 * is kept as its JSON text (and its recipient's digits): a string is one object to the garbage
 * collector, where the send's parsed components were dozens, and a benchmark's log of 200,000
 * sends otherwise made the sandbox pause long enough to take the sends that came meanwhile in a burst.
 */
export class SendsLog {
  private texts: string[] = [];
  private recipients: string[] = [];
  private next = 0;
  private wrapped = false;

  constructor(private readonly capacity = 200_000) {}

  add(entry: LoggedSend): void {
    const text = JSON.stringify(entry);
    const to = digitsOf(entry.to);
    if (!this.wrapped && this.texts.length < this.capacity) {
      this.texts.push(text);
      this.recipients.push(to);
      return;
    }
    this.wrapped = true;
    this.texts[this.next] = text;
    this.recipients[this.next] = to;
    this.next = (this.next + 1) % this.capacity;
  }

  /** Oldest first; `to` matches on digits, so "+1415..." and "1415..." are the same recipient. */
  list(to?: string): LoggedSend[] {
    const wanted = to ? digitsOf(to) : undefined;
    const found: LoggedSend[] = [];
    const start = this.wrapped ? this.next : 0;
    for (let n = 0; n < this.texts.length; n++) {
      const i = (start + n) % this.texts.length;
      if (wanted === undefined || this.recipients[i] === wanted) found.push(JSON.parse(this.texts[i]) as LoggedSend);
    }
    return found;
  }

  get size(): number {
    return this.texts.length;
  }

  clear(): void {
    this.texts = [];
    this.recipients = [];
    this.next = 0;
    this.wrapped = false;
  }
}
