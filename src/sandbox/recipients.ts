import type { RecipientOutcome } from './statuses.ts';

/** What `POST /__sandbox/recipients` may ask for one recipient. */
export type RuleOutcome = RecipientOutcome | 'reject' | 'defer' | 'held';
export const RULE_OUTCOMES: readonly RuleOutcome[] = ['reject', 'fail', 'no_read', 'ok', 'defer', 'held'];

/** What becomes of a held message: its statuses follow (release), or it fails with 132015 and its template pauses (drop). */
export type HeldFate = 'release' | 'drop';
export const HELD_FATES: readonly HeldFate[] = ['release', 'drop'];

export interface RecipientRule {
  outcome: RuleOutcome;
  errorCode: number;
  /** How long the first status callback of a send to this recipient is held back. */
  delayMs: number;
  /** defer: how many more MARKETING sends fail with 131049 before the rule is used up; reject: how many more sends are refused (none: every one). */
  remaining?: number;
  /** held: what happens once `holdMs` has passed. */
  then?: HeldFate;
  holdMs?: number;
}

/** How one send to a recipient is answered and what its statuses say. */
export type SendFate =
  | { kind: 'reject'; errorCode: number }
  | { kind: 'accept'; outcome: RecipientOutcome; errorCode: number | null; delayMs: number }
  | { kind: 'held'; then: HeldFate; holdMs: number };

/** Meta's per-user marketing cap (reference §8): the message is accepted, then fails by callback. */
export const MARKETING_CAP_ERROR = 131049;

const OK: SendFate = { kind: 'accept', outcome: 'ok', errorCode: null, delayMs: 0 };

/** The recipient rules, keyed by the recipient's digits. */
export class RecipientRules {
  private readonly rules = new Map<string, RecipientRule>();

  /** `onChange` is told after anything a snapshot holds has changed (to persist it). */
  constructor(private readonly onChange: () => void = () => {}) {}

  set(recipientId: string, rule: RecipientRule): void {
    // A rule that changes nothing is no rule.
    if (rule.outcome === 'ok' && rule.delayMs === 0) this.rules.delete(recipientId);
    else this.rules.set(recipientId, rule);
    this.onChange();
  }

  clear(): void {
    this.rules.clear();
    this.onChange();
  }

  /**
   * The fate of one send to this recipient. A `reject` rule with a count is gone after that many
   * refusals. A `defer` rule counts down on MARKETING template sends
   * only (Meta's cap is on marketing; utility and authentication pass) and is gone once used up;
   * `held` applies to template sends (pacing is a template matter), free-form messages pass.
   */
  fateOf(recipientId: string, category: string | null): SendFate {
    const rule = this.rules.get(recipientId);
    if (!rule) return OK;
    switch (rule.outcome) {
      case 'reject':
        if (rule.remaining !== undefined) this.countDown(recipientId, rule);
        return { kind: 'reject', errorCode: rule.errorCode };
      case 'held': return category === null ? OK : { kind: 'held', then: rule.then ?? 'release', holdMs: rule.holdMs ?? 0 };
      case 'defer': {
        if (category !== 'MARKETING') return { kind: 'accept', outcome: 'ok', errorCode: null, delayMs: rule.delayMs };
        this.countDown(recipientId, rule);
        return { kind: 'accept', outcome: 'fail', errorCode: MARKETING_CAP_ERROR, delayMs: rule.delayMs };
      }
      case 'fail': return { kind: 'accept', outcome: 'fail', errorCode: rule.errorCode, delayMs: rule.delayMs };
      default: return { kind: 'accept', outcome: rule.outcome, errorCode: null, delayMs: rule.delayMs };
    }
  }

  /** One use of a counted rule; the last one removes it. */
  private countDown(recipientId: string, rule: RecipientRule): void {
    rule.remaining = (rule.remaining ?? 1) - 1;
    if (rule.remaining <= 0) this.rules.delete(recipientId);
    this.onChange();
  }

  list(): [string, RecipientRule][] {
    return [...this.rules];
  }

  snapshot(): [string, RecipientRule][] {
    return this.list();
  }

  restore(saved: [string, RecipientRule][]): void {
    for (const [recipientId, rule] of saved) this.rules.set(recipientId, rule);
  }
}

/** A rule as the control API shows it. */
export function ruleJson(recipientId: string, rule: RecipientRule): Record<string, unknown> {
  const json: Record<string, unknown> = {
    to: recipientId, outcome: rule.outcome, error_code: rule.outcome === 'reject' || rule.outcome === 'fail' ? rule.errorCode : rule.outcome === 'defer' ? MARKETING_CAP_ERROR : null,
    delay_ms: rule.delayMs,
  };
  if (rule.outcome === 'defer') json.remaining = rule.remaining ?? 1;
  if (rule.outcome === 'reject' && rule.remaining !== undefined) json.remaining = rule.remaining;
  if (rule.outcome === 'held') Object.assign(json, { then: rule.then ?? 'release', hold_ms: rule.holdMs ?? 0 });
  return json;
}
