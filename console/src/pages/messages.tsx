import { useState } from 'preact/hooks';
import { get, qs, type S } from '../api.ts';

type Outbound = Extract<S['Message'], { direction: 'outbound' }>;
import { ErrorBox, Field, Pager, Status, useLoad, when } from '../ui.tsx';

const STATUSES = ['', 'accepted', 'sent', 'delivered', 'read', 'failed', 'unknown'];

export function MessagesPage() {
  const [status, setStatus] = useState('');
  const [page, setPage] = useState(1);
  const { data, error } = useLoad(() => get<S['MessagePage']>(`/messages${qs({ direction: 'outbound', status, page, limit: 20 })}`), [status, page]);
  return (
    <>
      <h1 tabIndex={-1}>Messages</h1>
      <Field label="Status">
        <select value={status} onChange={(e) => { setStatus((e.target as HTMLSelectElement).value); setPage(1); }}>{STATUSES.map((s) => <option value={s}>{s || 'all'}</option>)}</select>
      </Field>
      <ErrorBox error={error} />
      {data && (
        <>
          <div class="scroll"><table>
            <thead><tr><th scope="col">To</th><th scope="col">Template</th><th scope="col">Status</th><th scope="col">Error</th><th scope="col">Sent</th><th scope="col">Campaign</th></tr></thead>
            <tbody>{(data.data as Outbound[]).map((m) => (
              <tr><td>{m.contact_id ? <a href={`#/contacts/${m.contact_id}`}>{m.to}</a> : m.to}</td><td>{m.template_name}</td><td><Status value={m.status} /></td>
                <td class="small">{m.error ? `${m.error.code ?? ''} ${(m.error as { title?: string }).title ?? ''}` : ''}</td><td class="small">{when(m.sent_at)}</td>
                <td>{m.campaign_id ? <a href={`#/campaigns/${m.campaign_id}`}>open</a> : '—'}</td></tr>
            ))}</tbody>
          </table></div>
          <Pager pagination={data.pagination} onPage={setPage} />
        </>
      )}
    </>
  );
}
