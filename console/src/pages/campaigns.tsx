import { get, type S } from '../api.ts';
import { Act, ErrorBox, Progress, Status, useLoad, when } from '../ui.tsx';

/** Recipients the dispatcher is done with (whatever their outcome). */
export const processed = (s: S['CampaignStats']) => s.sent + s.failed + s.skipped;

/** The funnel's order; any stat the API adds later is shown after these. */
const ORDER = ['sent', 'delivered', 'read', 'replied', 'clicked', 'failed', 'deferred', 'skipped', 'held', 'pending'];

/** Every count of the stats but the total, in funnel order. */
export function statSteps(stats: S['CampaignStats']): [string, number][] {
  const counts = stats as unknown as Record<string, number>;
  const keys = [...ORDER.filter((k) => k in counts), ...Object.keys(counts).filter((k) => k !== 'total' && !ORDER.includes(k))];
  return keys.map((k) => [k, counts[k]]);
}

export function Funnel({ stats }: { stats: S['CampaignStats'] }) {
  const steps = statSteps(stats);
  return (
    <dl class="funnel" aria-label="Funnel">
      {steps.map(([k, v]) => <div><dt>{k}</dt><dd>{v}</dd></div>)}
    </dl>
  );
}

export function CampaignsPage() {
  const { data, error } = useLoad(() => get<S['CampaignList']>('/campaigns'), []);
  return (
    <>
      <div class="row between">
        <h1 tabIndex={-1}>Campaigns</h1>
        <Act scope="campaigns:write" kind="primary" onClick={() => { location.hash = '#/campaigns/new'; }}>New campaign</Act>
      </div>
      <ErrorBox error={error} />
      {data && data.data.length === 0 && <p>No campaigns yet.</p>}
      {data && data.data.length > 0 && (
        <div class="scroll">
          <table>
            <thead><tr><th scope="col">Name</th><th scope="col">Status</th><th scope="col">Progress</th><th scope="col">Funnel</th><th scope="col">Created</th></tr></thead>
            <tbody>
              {data.data.map((c) => (
                <tr>
                  <td><a href={`#/campaigns/${c.id}`}>{c.name}</a><div class="muted">{c.template_name}</div></td>
                  <td><Status value={c.status} /></td>
                  <td><Progress value={processed(c.stats)} max={c.total_recipients || c.stats.total} label={`Progress of ${c.name}`} /></td>
                  <td class="small funnel-line">{statSteps(c.stats).map(([k, v], i) => <>{i > 0 && ' · '}<span>{v} {k}</span></>)}</td>
                  <td class="small">{when(c.created_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}
