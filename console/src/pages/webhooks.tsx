import { useState } from 'preact/hooks';
import { get, post, qs, type S } from '../api.ts';
import { Act, ErrorBox, Field, Pager, Status, useLoad, when } from '../ui.tsx';

const STATUSES = ['', 'pending', 'success', 'failed', 'retrying', 'abandoned'];

/** A JSON body indented for reading; other text as it is. */
const pretty = (text: string) => { try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text; } };

export function WebhooksPage() {
  const endpoints = useLoad(() => get<S['WebhookEndpointList']>('/webhooks'), []);
  const metrics = useLoad(() => get<S['DeliveryMetrics']>('/webhooks/deliveries/metrics'), []);
  const [status, setStatus] = useState('');
  const [page, setPage] = useState(1);
  const [endpoint, setEndpoint] = useState('');
  const deliveries = useLoad(() => get<S['DeliveryPage']>(`${endpoint ? `/webhooks/${endpoint}/deliveries` : '/webhooks/deliveries'}${qs({ status, page, limit: 20 })}`), [status, page, endpoint]);
  const [open, setOpen] = useState<string | null>(null);
  const [result, setResult] = useState<{ what: string; error?: unknown; body?: unknown } | null>(null);
  const act = async (what: string, run: () => Promise<unknown>) => {
    try { setResult({ what, body: await run() }); void deliveries.reload(); void endpoints.reload(); } catch (error) { setResult({ what, error }); }
  };
  return (
    <>
      <h1 tabIndex={-1}>Webhooks</h1>
      <ErrorBox error={endpoints.error} />
      {metrics.data && <p class="small">Deliveries: {metrics.data.total} total, {metrics.data.success} succeeded, {metrics.data.retrying} retrying, {metrics.data.abandoned} abandoned, {metrics.data.pending} pending ({Math.round(metrics.data.success_rate * 100)}% success).</p>}
      <h2>Endpoints</h2>
      {endpoints.data?.data.length === 0 && <p class="muted">No endpoints.</p>}
      <div class="cards">
        {endpoints.data?.data.map((e) => (
          <article class="card" aria-label={e.url}>
            <div class="row between"><code class="wrap">{e.url}</code><Status value={e.is_active ? 'active' : 'disabled'} /></div>
            <p class="small">{e.events.join(', ')}</p>
            <p class="small muted">Last success {when(e.last_success_at)} · last failure {when(e.last_failure_at)} · {e.consecutive_failures} consecutive failures</p>
            <Act scope="webhooks:write" onClick={() => act(`Test event to ${e.url}`, () => post(`/webhooks/${e.id}/test`))}>Send test event</Act>
          </article>
        ))}
      </div>
      <CreateEndpoint onCreated={(r) => { setResult({ what: 'Endpoint created. Keep the signing secret: it is shown only now.', body: r }); void endpoints.reload(); }} />
      {result && (
        <div class="card" role="status">
          <strong>{result.what}</strong>
          <ErrorBox error={result.error} />
          {result.body !== undefined && <pre>{JSON.stringify(result.body, null, 2)}</pre>}
        </div>
      )}
      <h2>Delivery log</h2>
      <div class="row filters">
        <Field label="Endpoint"><select value={endpoint} onChange={(e) => { setEndpoint((e.target as HTMLSelectElement).value); setPage(1); }}><option value="">all</option>{endpoints.data?.data.map((e) => <option value={e.id}>{e.url}</option>)}</select></Field>
        <Field label="Status"><select value={status} onChange={(e) => { setStatus((e.target as HTMLSelectElement).value); setPage(1); }}>{STATUSES.map((s) => <option value={s}>{s || 'all'}</option>)}</select></Field>
      </div>
      <ErrorBox error={deliveries.error} />
      {deliveries.data && (
        <>
          <div class="scroll"><table>
            <thead><tr><th scope="col">Event</th><th scope="col">Status</th><th scope="col">Attempt</th><th scope="col">Response</th><th scope="col">Created</th><th scope="col"><span class="sr">Actions</span></th></tr></thead>
            <tbody>{deliveries.data.data.map((d) => (
              <>
                <tr>
                  <td>{d.event_type}</td><td><Status value={d.status} /></td><td>{d.attempt_number}</td>
                  <td>{d.response_status_code === null ? 'none' : `HTTP ${d.response_status_code}`}{d.response_time_ms !== null ? ` after ${d.response_time_ms} ms` : ''}</td><td class="small">{when(d.created_at)}</td>
                  <td><div class="row">
                    <button type="button" aria-expanded={open === d.id} onClick={() => setOpen(open === d.id ? null : d.id)}>Details</button>
                    {/* The API never retries a test event (send a new one instead). */}
                    {d.event_type === 'webhook.test'
                      ? <span class="small muted">test: not retried</span>
                      : <Act scope="webhooks:write" onClick={() => act('Delivery retried', () => post(`/webhooks/deliveries/${d.id}/retry`))}>Retry</Act>}
                  </div></td>
                </tr>
                {open === d.id && (
                  <tr><td colSpan={6}>
                    <dl class="facts">
                      <dt>Request</dt><dd>POST <code class="wrap">{d.request_url}</code>, event {d.event_id} ({d.event_type})
                        {d.request_body !== null && <pre class="body" aria-label="Request body">{pretty(d.request_body)}</pre>}</dd>
                      <dt>Response</dt><dd>{d.response_status_code === null ? 'no response' : `HTTP ${d.response_status_code}`}{d.response_time_ms !== null ? ` after ${d.response_time_ms} ms` : ''}
                        {d.response_body !== null && <pre class="body" aria-label="Response body">{d.response_body}</pre>}</dd>
                      <dt>Error</dt><dd>{d.error_message ?? '—'}</dd>
                      <dt>Next retry</dt><dd>{when(d.next_retry_at)}</dd><dt>Completed</dt><dd>{when(d.completed_at)}</dd>
                    </dl>
                  </td></tr>
                )}
              </>
            ))}</tbody>
          </table></div>
          <Pager pagination={deliveries.data.pagination} onPage={setPage} />
        </>
      )}
    </>
  );
}

function CreateEndpoint({ onCreated }: { onCreated: (r: S['WebhookEndpointCreated']) => void }) {
  const [url, setUrl] = useState('');
  const [events, setEvents] = useState('campaign.completed, message.failed');
  const [error, setError] = useState<unknown>(null);
  const create = async () => {
    setError(null);
    try { onCreated(await post<S['WebhookEndpointCreated']>('/webhooks', { url, events: events.split(',').map((e) => e.trim()).filter(Boolean) })); } catch (e) { setError(e); }
  };
  return (
    <form class="card" aria-labelledby="new-ep-h" onSubmit={(e) => { e.preventDefault(); void create(); }}>
      <h3 id="new-ep-h">Add an endpoint</h3>
      <Field label="HTTPS URL"><input type="url" required value={url} onInput={(e) => setUrl((e.target as HTMLInputElement).value)} /></Field>
      <Field label="Events (comma separated)"><input value={events} onInput={(e) => setEvents((e.target as HTMLInputElement).value)} /></Field>
      <Act scope="webhooks:write" kind="primary" onClick={() => void create()}>Add endpoint</Act>
      <ErrorBox error={error} />
    </form>
  );
}
