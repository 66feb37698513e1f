import { sql, type RawBuilder } from 'kysely';
import { parsePhoneNumberFromString } from 'libphonenumber-js/max';
import { Type, type Static } from 'typebox';
import type { Queryable } from '../../db/database.ts';
import { validationError } from '../../http/errors.ts';
import { Nullable } from '../../http/nullable.ts';
import regionTimeZones from './region-time-zones.json' with { type: 'json' };

/**
 * Send windows in the recipient's local time (issue 25 §4). A campaign's window is read in each
 * recipient's zone, fixed when it is materialised (campaign_recipients.time_zone): the contact's
 * own `time_zone`, else the zone of its phone number's region (region-time-zones.json: for a
 * region with several zones, its most populous one), else UTC. A recipient outside its window
 * stays pending with `not_before` at its next opening, which the dispatcher's claim already waits
 * for; the claim checks the window again, so one whose window closed while it waited is put back
 * to its next opening instead of sent. All zone arithmetic is PostgreSQL's (AT TIME ZONE, the same
 * tz database in PGlite), in one place: `openings` below.
 */

export const DAYS = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'] as const;
const HH_MM = '^([01][0-9]|2[0-3]):[0-5][0-9]$';

export const SendWindow = Type.Object({
  start: Type.String({ pattern: HH_MM, description: 'local time the window opens, HH:MM (24 h)' }),
  end: Type.String({ pattern: HH_MM, description: 'local time it closes, HH:MM; before start: the window spans midnight (it closes the next day)' }),
  days: Type.Optional(Nullable(Type.Array(Type.Union(DAYS.map((d) => Type.Literal(d))), { minItems: 1, maxItems: 7, description: 'local days the window opens on (a window spanning midnight belongs to the day it opens); absent: every day' }))),
  time_zone: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: '`recipient` (default): each recipient\'s zone; or one IANA zone for everyone' })),
});
export type SendWindowInput = Static<typeof SendWindow>;

/** A window as stored and answered: every key present, days in week order. */
export interface StoredSendWindow { start: string; end: string; days: (typeof DAYS)[number][] | null; time_zone: string }

const IANA_SHAPE = /^(UTC|[A-Z][A-Za-z_-]+(\/[A-Za-z0-9_+-]+)+)$/;
const zoneSets = new WeakMap<object, Promise<Set<string>>>();

/**
 * The IANA zone names the database knows (AT TIME ZONE must understand every zone we store), read
 * once per database. Only `Area/Location` names and UTC: not POSIX rules, abbreviations or offsets.
 */
export function knownTimeZones(db: Queryable): Promise<Set<string>> {
  let known = zoneSets.get(db);
  if (!known) {
    known = sql<{ name: string }>`SELECT name FROM pg_timezone_names`.execute(db)
      .then(({ rows }) => new Set(rows.map((r) => r.name).filter((n) => IANA_SHAPE.test(n) && !/^(posix|right)\//.test(n))));
    known.catch(() => zoneSets.delete(db));
    zoneSets.set(db, known);
  }
  return known;
}

export const timeZoneProblem = (name: string, known: Set<string>, field: string) =>
  known.has(name) ? null : `${field} must be an IANA time zone name such as Europe/Berlin or America/New_York (case matters); ${JSON.stringify(name)} is not one`;

/** Checks and normalises a window (400 naming the field); null removes it. */
export async function normaliseSendWindow(db: Queryable, input: SendWindowInput | null | undefined, loc: (string | number)[]): Promise<StoredSendWindow | null> {
  if (input === null || input === undefined) return null;
  if (input.start === input.end) throw validationError('send_window.start and send_window.end must differ (an end before the start spans midnight)', [...loc, 'end'], input.end);
  const zone = input.time_zone ?? 'recipient';
  if (zone !== 'recipient') {
    const problem = timeZoneProblem(zone, await knownTimeZones(db), 'send_window.time_zone (or "recipient")');
    if (problem) throw validationError(problem, [...loc, 'time_zone'], zone);
  }
  const wanted = (input.days ?? null) as string[] | null;
  const days = wanted ? DAYS.filter((d) => wanted.includes(d)) : null;
  return { start: input.start, end: input.end, days: days && days.length < 7 ? days : null, time_zone: zone };
}

const REGION_ZONES: Record<string, string> = { ...regionTimeZones.single_zone, ...regionTimeZones.multi_zone };
export const FALLBACK_ZONE = 'UTC';

/** The zone of a phone number's region (libphonenumber), or UTC when its region is not known. */
export function zoneOfPhone(phone: string): string {
  const region = parsePhoneNumberFromString(phone)?.country;
  return (region && REGION_ZONES[region]) || FALLBACK_ZONE;
}

/**
 * Phones grouped so that one sample number tells the whole group's region: `+` and four digits
 * (a +1 area code, +7 7 Kazakhstan), seven for +262 (Réunion and Mayotte differ after 262).
 * Christmas Island and Cocos (+61 8 9164, 9162) fall in Australia's groups.
 */
export const phoneZoneKey = (phone: RawBuilder<unknown>) => sql<string>`(CASE WHEN left(${phone}, 4) = '+262' THEN left(${phone}, 7) ELSE left(${phone}, 5) END)`;

/** The window's parts as SQL values: opening time, how long it stays open, ISO days (null: every day). */
export interface WindowSql { start: RawBuilder<unknown>; length: RawBuilder<unknown>; days: RawBuilder<unknown> }

/** A stored window (a jsonb SQL value) as SQL parts. */
export function windowFromJson(json: RawBuilder<unknown>): WindowSql {
  const start = sql`((${json})->>'start')::time`;
  const end = sql`((${json})->>'end')::time`;
  return {
    start,
    length: sql`(${end} - ${start} + CASE WHEN ${end} < ${start} THEN interval '24 hours' ELSE interval '0' END)`,
    days: sql`(CASE WHEN jsonb_typeof((${json})->'days') = 'array' THEN
      (SELECT array_agg(array_position(ARRAY['mon','tue','wed','thu','fri','sat','sun'], dn)) FROM jsonb_array_elements_text((${json})->'days') dn) END)`,
  };
}

/** A window given from JS as SQL parts. */
export const windowFromValue = (w: StoredSendWindow): WindowSql => windowFromJson(sql`${JSON.stringify(w)}::jsonb`);

/**
 * The window's openings in `zone` (rows: opens, closes as timestamptz) whose local day is from the
 * day before `at` to `days` days after it, on the window's days. The one place local wall-clock
 * time becomes an instant: `(local day + start) AT TIME ZONE zone`.
 */
export function openings(w: WindowSql, zone: RawBuilder<unknown>, at: RawBuilder<unknown>, days = 8) {
  return sql`(
    SELECT (d::date + ${w.start}) AT TIME ZONE ${zone} AS opens, (d::date + ${w.start} + ${w.length}) AT TIME ZONE ${zone} AS closes
    FROM generate_series(((${at} AT TIME ZONE ${zone})::date - 1)::timestamp, ((${at} AT TIME ZONE ${zone})::date + ${days}::int)::timestamp, interval '1 day') d
    WHERE ${w.days} IS NULL OR extract(isodow FROM d)::int = ANY(${w.days}::int[]))`;
}

/** When a recipient in `zone` may go at `at`: null while its window is open, else its next opening. */
export function waitUntil(w: WindowSql, zone: RawBuilder<unknown>, at: RawBuilder<unknown> = sql`now()`) {
  return sql<Date | null>`(SELECT CASE WHEN bool_or(o.opens <= ${at} AND ${at} < o.closes) THEN NULL ELSE min(o.opens) FILTER (WHERE o.opens > ${at}) END
    FROM ${openings(w, zone, at)} o)`;
}

/**
 * The claim's check (recipients alias r of campaign `campaignId`): when the recipient may go, null
 * while its window is open or when the campaign has no window (read once per statement).
 */
export function claimWaitUntil(campaignId: string) {
  const json = sql`(SELECT sw.send_window FROM campaigns sw WHERE sw.id = ${campaignId}::uuid)`;
  return sql<Date | null>`(CASE WHEN ${json} IS NULL THEN NULL::timestamptz ELSE ${waitUntil(windowFromJson(json), sql`coalesce(r.time_zone, ${FALLBACK_ZONE})`)} END)`;
}

/**
 * What materialising under a window needs of an audience: the zone of each group of phones of
 * contacts without a zone of their own (resolved here, from one sample each) and every zone in use.
 * `source` is a FROM and WHERE over contacts (alias c).
 */
export async function audienceZones(db: Queryable, source: RawBuilder<unknown>): Promise<{ byKey: Record<string, string>; counts: Map<string, number> }> {
  const { rows } = await sql<{ key: string | null; time_zone: string | null; sample: string; n: number }>`
    SELECT CASE WHEN c.time_zone IS NULL THEN ${phoneZoneKey(sql`c.phone`)} END AS key, c.time_zone, min(c.phone) AS sample, count(*)::int AS n
    FROM ${source} GROUP BY 1, 2`.execute(db);
  const byKey: Record<string, string> = {};
  const counts = new Map<string, number>();
  for (const r of rows) {
    const zone = r.time_zone ?? zoneOfPhone(r.sample);
    if (r.key !== null) byKey[r.key] = zone;
    counts.set(zone, (counts.get(zone) ?? 0) + Number(r.n));
  }
  return { byKey, counts };
}

/**
 * The columns a materialising INSERT ... SELECT over contacts (alias c) adds under a window: `join`
 * (after c's FROM item) and the recipient's `zone` and `notBefore`. The wait is worked out once per
 * zone in use, not per recipient.
 */
export function materialisedWindow(window: StoredSendWindow, zones: { byKey: Record<string, string>; counts: Map<string, number> }) {
  const w = windowFromValue(window);
  const zone = window.time_zone === 'recipient'
    ? sql<string>`coalesce(c.time_zone, zk.zone, ${FALLBACK_ZONE})`
    : sql<string>`${window.time_zone}::text`;
  const inUse = window.time_zone === 'recipient' ? [...new Set([...zones.counts.keys(), FALLBACK_ZONE])] : [window.time_zone];
  return {
    join: sql`
      LEFT JOIN (SELECT key, value AS zone FROM jsonb_each_text(${JSON.stringify(zones.byKey)}::jsonb)) zk ON zk.key = ${phoneZoneKey(sql`c.phone`)}
      LEFT JOIN (SELECT z.zone, ${waitUntil(w, sql`z.zone`)} AS until FROM unnest(${inUse}::text[]) z(zone)) zw ON zw.zone = ${zone}`,
    zone,
    notBefore: sql<Date | null>`zw.until`,
  };
}

/**
 * The pre-flight's duration with a window: each zone's recipients (`counts`) go in its openings
 * from now on, at the number's full rate, the zones side by side; the campaign takes until the
 * last zone is done, and at least the whole audience at the rate. Up to 60 days of openings.
 */
export async function windowedDurationSeconds(db: Queryable, window: StoredSendWindow, counts: Map<string, number>, perSecond: number): Promise<number> {
  const total = [...counts.values()].reduce((a, b) => a + b, 0);
  const plain = Math.ceil(total / perSecond);
  if (total === 0) return 0;
  const w = windowFromValue(window);
  const zones = [...counts.keys()];
  const { rows } = await sql<{ zone: string; opens: Date; closes: Date; now: Date }>`
    SELECT z.zone, greatest(o.opens, now()) AS opens, o.closes, now() AS now
    FROM unnest(${zones}::text[]) z(zone), LATERAL ${openings(w, sql`z.zone`, sql`now()`, 60)} o
    WHERE o.closes > now() ORDER BY z.zone, o.opens`.execute(db);
  let end = 0;
  for (const zone of zones) {
    let left = (counts.get(zone) ?? 0) / perSecond;
    let finish = 0;
    for (const o of rows.filter((r) => r.zone === zone)) {
      const open = (o.closes.getTime() - o.opens.getTime()) / 1000;
      const start = (o.opens.getTime() - o.now.getTime()) / 1000;
      if (left <= open) { finish = start + left; left = 0; break; }
      left -= open;
      finish = start + open;
    }
    // More than 60 days of openings: the rest at the same share of time open.
    if (left > 0) finish += left * ((60 * 86_400) / Math.max(1, rowsOpenSeconds(rows, zone)));
    end = Math.max(end, finish);
  }
  return Math.max(plain, Math.ceil(end));
}

const rowsOpenSeconds = (rows: { zone: string; opens: Date; closes: Date }[], zone: string) =>
  rows.filter((r) => r.zone === zone).reduce((s, r) => s + (r.closes.getTime() - r.opens.getTime()) / 1000, 0);
