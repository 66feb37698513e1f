import { useEffect, useRef, useState } from 'preact/hooks';
import { call, download, get, post, qs, type S } from '../api.ts';
import { BarChart, LineChart } from '../chart.tsx';
import { Act, Confirm, ErrorBox, Field, Pager, Progress, Status, useLoad, when } from '../ui.tsx';
import { Funnel, processed, statSteps } from './campaigns.tsx';

const rate = (r: number | null) => (r === null ? '—' : `${Math.round(r * 1000) / 10}%`);

type Detail = S['CampaignDetail'];
type Action = 'send' | 'schedule' | 'pause' | 'resume' | 'stop';

/** What each status allows (docs/campaigns.md's state table). */
const ACTIONS: Record<string, Action[]> = {
  DRAFT: ['send', 'schedule'], SCHEDULED: ['send', 'pause'], RUNNING: ['pause', 'stop'], PAUSED: ['resume', 'stop'],
  COMPLETED: [], STOPPED: [], FAILED: [],
};
const LIVE = new Set(['RUNNING', 'SCHEDULED']);

export function CampaignPage({ id }: { id: string }) {
  const [campaign, setCampaign] = useState<Detail | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [series, setSeries] = useState<{ xs: number[]; ys: number[] }>({ xs: [], ys: [] });
  const last = useRef<{ t: number; n: number } | null>(null);
  const [tick, setTick] = useState(0);

  useEffect(() => {
    let stop = false;
    let timer: ReturnType<typeof setTimeout>;
    const poll = async () => {
      try {
        const c = await get<Detail>(`/campaigns/${id}`);
        if (stop) return;
        setCampaign(c); setError(null);
        const t = Date.now() / 1000; const n = processed(c.stats);
        if (last.current && t > last.current.t) {
          const rate = Math.max(0, (n - last.current.n) / (t - last.current.t));
          setSeries((s) => ({ xs: [...s.xs, t].slice(-300), ys: [...s.ys, rate].slice(-300) }));
        }
        last.current = { t, n };
        timer = setTimeout(poll, LIVE.has(c.status) ? 1000 : 5000);
      } catch (e) { if (!stop) { setError(e); timer = setTimeout(poll, 5000); } }
    };
    void poll();
    return () => { stop = true; clearTimeout(timer); };
  }, [id, tick]);

  if (!campaign) return <><h1 tabIndex={-1}>Campaign</h1><ErrorBox error={error} />{!error && <p>Loading…</p>}</>;
  const c = campaign;
  const refresh = () => setTick((t) => t + 1);
  return (
    <>
      <div class="row between">
        <h1 tabIndex={-1}>{c.name}</h1>
        <Status value={c.status} />
      </div>
      <ErrorBox error={error} />
      <p class="muted">Template {c.template_name} ({c.template_language}, {c.template_category}) · created {when(c.created_at)} · started {when(c.started_at)} · completed {when(c.completed_at)}</p>
      {c.failure_reason && <p class="error">Failed: {c.failure_reason}</p>}
      {c.paused_reason && <p class="warn">Paused: {c.paused_reason}</p>}
      <Actions campaign={c} onDone={refresh} />
      <section aria-labelledby="progress-h">
        <h2 id="progress-h">Progress</h2>
        <Progress value={processed(c.stats)} max={c.total_recipients || c.stats.total} label="Campaign progress" />
        <p class="small">{processed(c.stats)} of {c.total_recipients || c.stats.total} recipients processed</p>
        <Funnel stats={c.stats} />
      </section>
      <div class="grid2">
        <section aria-labelledby="rate-h">
          <h2 id="rate-h">Sends per second</h2>
          <LineChart xs={series.xs} ys={series.ys} label="Sends per second" />
        </section>
        <section aria-labelledby="funnel-h">
          <h2 id="funnel-h">Funnel</h2>
          <BarChart label="Funnel chart" bars={statSteps(c.stats).filter(([k]) => k !== 'pending' && k !== 'held')} />
          <p class="small">Of those sent: {rate(c.funnel.delivered_rate)} delivered, {rate(c.funnel.read_rate)} read, {rate(c.funnel.replied_rate)} replied, {rate(c.funnel.clicked_rate)} clicked.</p>
        </section>
      </div>
      <Preflight p={c.preflight} cost={c.cost} />
      <Errors campaign={c} />
      <Recipients id={c.id} version={processed(c.stats) + c.stats.delivered + c.stats.read} />
    </>
  );
}

function Actions({ campaign, onDone }: { campaign: Detail; onDone: () => void }) {
  const [asking, setAsking] = useState<Action | null>(null);
  const [at, setAt] = useState('');
  const allowed = ACTIONS[campaign.status] ?? [];
  const words: Record<Action, string> = { send: 'Send now', schedule: 'Schedule', pause: 'Pause', resume: 'Resume', stop: 'Stop' };
  const explain: Record<Action, string> = {
    send: `Start sending to ${campaign.preflight.audience_size} recipients now.`,
    schedule: 'Start sending at the time below.',
    pause: 'Messages in flight finish; no new ones are sent until you resume.',
    resume: 'Sending continues where it stopped.',
    stop: 'Stopping is permanent: recipients not yet sent stay unsent.',
  };
  return (
    <div class="row actions" role="group" aria-label="Actions">
      {allowed.length === 0 && <span class="muted">No actions in status {campaign.status}.</span>}
      {allowed.map((a) => <Act scope="campaigns:send" kind={a === 'stop' ? 'danger' : a === 'send' ? 'primary' : ''} onClick={() => setAsking(a)}>{words[a]}</Act>)}
      {asking && (
        <Confirm title={`${words[asking]}: ${campaign.name}`} confirmLabel={`Yes, ${words[asking].toLowerCase()}`} onClose={() => setAsking(null)}
          onConfirm={async () => {
            await post(`/campaigns/${campaign.id}/${asking}`, asking === 'schedule' ? { scheduled_at: scheduledAt(at) } : undefined);
            onDone();
          }}>
          <p>{explain[asking]}</p>
          {asking === 'send' && <PreflightSummary p={campaign.preflight} />}
          {asking === 'schedule' && <Field label="Start at (your local time)"><input type="datetime-local" required value={at} onInput={(e) => setAt((e.target as HTMLInputElement).value)} /></Field>}
        </Confirm>
      )}
    </div>
  );
}

export function PreflightSummary({ p }: { p: S['CampaignPreflight'] }) {
  return (
    <ul class="small">
      <li>Audience: {p.audience_size} (excluded: {p.excluded.opted_out} opted out, {p.excluded.marketing_blocked_country} blocked country, {p.excluded.frequency_cap} frequency cap)</li>
      <li>Estimated duration: {p.estimated_duration_seconds === null ? 'unknown' : `${p.estimated_duration_seconds} s`} at {p.messages_per_second ?? '?'} messages/s</li>
      <li>Estimated cost: {p.estimated_cost.amount === null ? 'unknown (no rate card)' : `${p.estimated_cost.amount} ${p.estimated_cost.currency}`}</li>
      {p.warnings.map((w) => <li class="warn">{w}</li>)}
    </ul>
  );
}

function Preflight({ p, cost }: { p: S['CampaignPreflight']; cost: Detail['cost'] }) {
  return (
    <section aria-labelledby="pre-h">
      <h2 id="pre-h">Pre-flight</h2>
      <PreflightSummary p={p} />
      <p class="small">Capacity: tier {p.messaging_tier ?? 'unknown'}{p.tier_limit !== null ? ` (limit ${p.tier_limit})` : ''}, {p.within_tier ? 'within' : 'beyond'} the tier; messaging limit used {p.messaging_limit_used ?? '—'} of {p.messaging_limit_available === null ? 'unlimited' : (p.messaging_limit_used ?? 0) + p.messaging_limit_available}; template quality {p.template_quality_score ?? 'unknown'}. Spent so far: {cost.spent} {cost.currency ?? ''}.</p>
    </section>
  );
}

function Errors({ campaign }: { campaign: Detail }) {
  const { data, error, reload } = useLoad(() => get<S['CampaignErrorsSummary']>(`/campaigns/${campaign.id}/errors`), [campaign.id, campaign.stats.failed]);
  const [open, setOpen] = useState<string | null>(null);
  const [retarget, setRetarget] = useState<string[] | null>(null);
  void reload;
  return (
    <section aria-labelledby="err-h">
      <h2 id="err-h">Errors ({data?.total_failed ?? 0} failed)</h2>
      <ErrorBox error={error} />
      {data && data.by_code.length === 0 && <p class="muted">No failures.</p>}
      {data && data.by_code.map((g) => (
        <div class="card error-group">
          <div class="row between">
            <strong>{g.code}: {g.title} ({g.count})</strong>
            <div class="row">
              <button type="button" aria-expanded={open === g.code} onClick={() => setOpen(open === g.code ? null : g.code)}>{open === g.code ? 'Hide' : 'Show'} recipients</button>
              <Act scope="campaigns:write" onClick={() => setRetarget([g.code])}>Retarget these</Act>
            </div>
          </div>
          <p class="small">Fix: {g.fix}</p>
          <p class="small muted">Example: {g.sample_message}</p>
          {open === g.code && <Drill id={campaign.id} code={g.code} />}
        </div>
      ))}
      {retarget && (
        <Confirm title="Retarget failed recipients" confirmLabel="Yes, make the retarget campaign" onClose={() => setRetarget(null)}
          onConfirm={async () => {
            const made = await post<S['Campaign']>(`/campaigns/${campaign.id}/retarget`, { error_codes: retarget });
            location.hash = `#/campaigns/${made.id}`;
          }}>
          <p>Makes a new draft campaign for the recipients that failed with {retarget.join(', ')}. Nothing is sent until you send it.</p>
        </Confirm>
      )}
    </section>
  );
}

function Drill({ id, code }: { id: string; code: string }) {
  const { data, error } = useLoad(() => get<S['CampaignErrorRecipients']>(`/campaigns/${id}/errors/${encodeURIComponent(code)}?limit=200`), [id, code]);
  return (
    <>
      <ErrorBox error={error} />
      {data && (
        <div class="scroll"><table>
          <caption class="sr">Recipients that failed with {code}</caption>
          <thead><tr><th scope="col">Phone</th><th scope="col">Status</th><th scope="col">Error</th><th scope="col">Contact</th></tr></thead>
          <tbody>{data.recipients.map((r) => <tr><td>{r.phone_number}</td><td>{r.status}</td><td>{r.error}</td><td>{r.contact_id ? <a href={`#/contacts/${r.contact_id}`}>open</a> : '—'}</td></tr>)}</tbody>
        </table></div>
      )}
    </>
  );
}

const RECIPIENT_STATUSES = ['', 'pending', 'sending', 'held', 'deferred', 'skipped', 'sent', 'delivered', 'read', 'failed'];

function Recipients({ id, version }: { id: string; version: number }) {
  const [status, setStatus] = useState('');
  const [page, setPage] = useState(1);
  const [csvError, setCsvError] = useState<unknown>(null);
  const { data, error } = useLoad(() => get<S['CampaignRecipientPage']>(`/campaigns/${id}/recipients${qs({ status, page, limit: 20 })}`), [id, status, page, version]);
  return (
    <section aria-labelledby="rec-h">
      <h2 id="rec-h">Recipients</h2>
      <div class="row">
        <Field label="Status">
          <select value={status} onChange={(e) => { setStatus((e.target as HTMLSelectElement).value); setPage(1); }}>
            {RECIPIENT_STATUSES.map((s) => <option value={s}>{s || 'all'}</option>)}
          </select>
        </Field>
        <button type="button" onClick={async () => {
          setCsvError(null);
          try {
            const res = await call('GET', `/campaigns/${id}/recipients${qs({ status })}`, undefined, { accept: 'text/csv' });
            download(`campaign-${id}-recipients${status ? `-${status}` : ''}.csv`, await res.text());
          } catch (e) { setCsvError(e); }
        }}>Download CSV</button>
      </div>
      <ErrorBox error={error ?? csvError} />
      {data && (
        <>
          <div class="scroll"><table>
            <thead><tr><th scope="col">Phone</th><th scope="col">Status</th><th scope="col">Error</th><th scope="col">Attempts</th><th scope="col">Updated</th></tr></thead>
            <tbody>{data.data.map((r) => <tr><td>{r.contact_id ? <a href={`#/contacts/${r.contact_id}`}>{r.phone_number}</a> : r.phone_number}</td><td>{r.status}{r.skip_reason ? ` (${r.skip_reason})` : ''}</td><td>{r.error_code ? `${r.error_code}: ${r.error}` : ''}</td><td>{r.attempts}</td><td class="small">{when(r.updated_at)}</td></tr>)}</tbody>
          </table></div>
          <Pager pagination={data.pagination} onPage={setPage} />
        </>
      )}
    </section>
  );
}

/** A datetime-local value as ISO-8601 UTC, or an error to show when none is chosen. */
export function scheduledAt(local: string): string {
  const at = new Date(local);
  if (!local || Number.isNaN(at.getTime())) throw new Error('Choose the date and time to start at.');
  return at.toISOString();
}
