export interface LoggedSend {
  message_id: string;
  to: string;
  template: string | null;
  language: string | null;
  components: unknown;
  biz_opaque_callback_data: string | null;
  at: string;
}

export const digitsOf = (phone: string) => phone.replace(/\D/g, '');

/** Every accepted send, newest last, in a ring so a long benchmark cannot exhaust memory. */
export class SendsLog {
  private entries: LoggedSend[] = [];
  private next = 0;
  private wrapped = false;

  constructor(private readonly capacity = 200_000) {}

  add(entry: LoggedSend): void {
    if (!this.wrapped && this.entries.length < this.capacity) {
      this.entries.push(entry);
      return;
    }
    this.wrapped = true;
    this.entries[this.next] = entry;
    this.next = (this.next + 1) % this.capacity;
  }

  /** Oldest first; `to` matches on digits, so "+1415..." and "1415..." are the same recipient. */
  list(to?: string): LoggedSend[] {
    const ordered = this.wrapped ? this.entries.slice(this.next).concat(this.entries.slice(0, this.next)) : this.entries;
    if (!to) return ordered.slice();
    const wanted = digitsOf(to);
    return ordered.filter((entry) => digitsOf(entry.to) === wanted);
  }

  get size(): number {
    return this.entries.length;
  }

  clear(): void {
    this.entries = [];
    this.next = 0;
    this.wrapped = false;
  }
}
