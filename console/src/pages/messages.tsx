import { useState } from 'preact/hooks';
import { get, qs, type S } from '../api.ts';
import { ErrorBox, Field, Pager, Status, useLoad, when } from '../ui.tsx';

type Message = S['Message'];
type Inbound = Extract<Message, { direction: 'inbound' }>;
const STATUSES = ['', 'accepted', 'sent', 'delivered', 'read', 'failed', 'unknown'];

/** What an inbound message says, whatever its type. */
function inboundText(m: Inbound): string {
  return m.text ?? m.button?.text ?? m.interactive?.title ?? m.media?.caption ?? m.media?.filename ?? m.location?.name ?? `(${m.type})`;
}

export function MessagesPage() {
  const [direction, setDirection] = useState('');
  const [status, setStatus] = useState('');
  const [page, setPage] = useState(1);
  // A status selects sent messages only (the API's rule), so choosing one implies outbound.
  const { data, error } = useLoad(() => get<S['MessagePage']>(`/messages${qs({ direction: status ? 'outbound' : direction, status, page, limit: 20 })}`), [direction, status, page]);
  return (
    <>
      <h1 tabIndex={-1}>Messages</h1>
      <div class="row filters">
        <Field label="Direction">
          <select value={direction} onChange={(e) => { setDirection((e.target as HTMLSelectElement).value); setStatus(''); setPage(1); }}>
            <option value="">sent and received</option><option value="outbound">sent</option><option value="inbound">received</option>
          </select>
        </Field>
        <Field label="Status (sent messages)">
          <select value={status} disabled={direction === 'inbound'} onChange={(e) => { setStatus((e.target as HTMLSelectElement).value); setPage(1); }}>{STATUSES.map((s) => <option value={s}>{s || 'all'}</option>)}</select>
        </Field>
      </div>
      <ErrorBox error={error} />
      {data && data.data.length === 0 && <p class="muted">No messages.</p>}
      {data && (
        <>
          <div class="scroll"><table>
            <thead><tr><th scope="col">Direction</th><th scope="col">Contact</th><th scope="col">Message</th><th scope="col">Status</th><th scope="col">Error</th><th scope="col">At</th><th scope="col">Campaign</th></tr></thead>
            <tbody>{data.data.map((m) => {
              const phone = m.direction === 'outbound' ? m.to : (m.from ?? m.from_user_id ?? '');
              return (
                <tr class={m.direction}>
                  <td>{m.direction === 'outbound' ? 'sent' : 'received'}</td>
                  <td>{m.contact_id ? <a href={`#/contacts/${m.contact_id}`}>{phone}</a> : phone}</td>
                  {m.direction === 'outbound'
                    ? <><td>{m.template_name}</td><td><Status value={m.status} /></td><td class="small">{m.error ? `${m.error.code ?? ''} ${m.error.title}` : ''}</td><td class="small">{when(m.sent_at ?? m.created_at)}</td>
                        <td>{m.campaign_id ? <a href={`#/campaigns/${m.campaign_id}`}>open</a> : '—'}</td></>
                    : <><td>{m.deleted_at ? <em>deleted</em> : inboundText(m)}{m.edited_at ? <span class="muted"> (edited)</span> : null}</td><td><Status value="received" /></td><td /><td class="small">{when(m.timestamp)}</td><td>—</td></>}
                </tr>
              );
            })}</tbody>
          </table></div>
          <Pager pagination={data.pagination} onPage={setPage} />
        </>
      )}
    </>
  );
}
