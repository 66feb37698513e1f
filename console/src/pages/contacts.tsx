import { useState } from 'preact/hooks';
import { del, download, get, patch, post, qs, type S } from '../api.ts';
import { Act, ErrorBox, Field, Pager, Progress, useLoad, when, parseCsv, toCsv } from '../ui.tsx';

const COLUMNS = ['first_name', 'last_name', 'phone', 'email', 'company', 'job_title', 'status', 'source'];

export function ContactsPage() {
  const [form, setForm] = useState({ search: '', status: '', tag: '' });
  const [query, setQuery] = useState(form);
  const [page, setPage] = useState(1);
  const { data, error, reload } = useLoad(() => post<S['ContactPage']>(`/contacts/search${qs({ page, limit: 20 })}`,
    { ...(query.search ? { search_term: query.search } : {}), ...(query.status ? { status: query.status } : {}), ...(query.tag ? { tag: query.tag } : {}) }), [query, page]);
  const input = (k: keyof typeof form) => (e: Event) => setForm({ ...form, [k]: (e.target as HTMLInputElement).value });
  return (
    <>
      <h1 tabIndex={-1}>Contacts</h1>
      <form class="row filters" role="search" onSubmit={(e) => { e.preventDefault(); setPage(1); setQuery(form); }}>
        <Field label="Search"><input type="search" value={form.search} onInput={input('search')} /></Field>
        <Field label="Status"><input value={form.status} onInput={input('status')} /></Field>
        <Field label="Tag"><input value={form.tag} onInput={input('tag')} /></Field>
        <button type="submit">Search</button>
      </form>
      <ErrorBox error={error} />
      {data && (
        <>
          <div class="scroll"><table>
            <thead><tr><th scope="col">Name</th><th scope="col">Phone</th><th scope="col">Email</th><th scope="col">Status</th><th scope="col">Tags</th></tr></thead>
            <tbody>{data.data.map((c) => <tr><td><a href={`#/contacts/${c.id}`}>{c.first_name} {c.last_name ?? ''}</a></td><td>{c.phone}</td><td>{c.email ?? ''}</td><td>{c.status ?? ''}</td><td>{c.tags.join(', ')}</td></tr>)}</tbody>
          </table></div>
          <Pager pagination={data.pagination} onPage={setPage} />
        </>
      )}
      <Import onDone={reload} />
    </>
  );
}

interface Progression { done: number; total: number; created: number; refused: string[][] }

/**
 * CSV import through POST /contacts/bulk, 100 rows a call. Known columns become contact fields,
 * `tags` is split on `;` or `|`, any other column goes to custom_fields. Where it got to is kept for
 * the tab (sessionStorage) under the file's name and size: importing the same file again resumes.
 */
function Import({ onDone }: { onDone: () => void }) {
  const [file, setFile] = useState<File | null>(null);
  const [progress, setProgress] = useState<Progression | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [running, setRunning] = useState(false);
  const run = async () => {
    if (!file) return;
    setRunning(true); setError(null);
    try {
      const rows = parseCsv(await file.text());
      const header = (rows.shift() ?? []).map((h) => h.trim());
      const mark = `console.import:${file.name}:${file.size}`;
      const saved = JSON.parse(sessionStorage.getItem(mark) ?? 'null') as Progression | null;
      const state: Progression = saved && saved.total === rows.length ? saved : { done: 0, total: rows.length, created: 0, refused: [] };
      setProgress({ ...state });
      while (state.done < rows.length) {
        const batch = rows.slice(state.done, state.done + 100);
        const contacts = batch.map((r) => {
          const c: Record<string, unknown> = { custom_fields: {} as Record<string, string> };
          header.forEach((h, i) => {
            const v = (r[i] ?? '').trim();
            if (!v) return;
            if (COLUMNS.includes(h)) c[h] = v;
            else if (h === 'tags') c.tags = v.split(/[;|]/).map((t) => t.trim()).filter(Boolean);
            else (c.custom_fields as Record<string, string>)[h] = v;
          });
          return c;
        });
        const result = await post<S['ContactBulkResult']>('/contacts/bulk', { contacts });
        state.created += result.created;
        for (const e of result.errors) state.refused.push([...batch[e.index], e.error]);
        state.done += batch.length;
        sessionStorage.setItem(mark, JSON.stringify(state));
        setProgress({ ...state });
      }
      sessionStorage.removeItem(mark);
      onDone();
    } catch (e) { setError(e); } finally { setRunning(false); }
  };
  return (
    <section class="card" aria-labelledby="import-h">
      <h2 id="import-h">Import contacts from CSV</h2>
      <p class="small muted">First row: column names. first_name and phone (E.164) are required; last_name, email, company, job_title, status, source and tags (separated by ;) are contact fields; any other column becomes a custom field.</p>
      <div class="row">
        <Field label="CSV file"><input type="file" accept=".csv,text/csv" onChange={(e) => { setFile((e.target as HTMLInputElement).files?.[0] ?? null); setProgress(null); }} /></Field>
        <Act scope="contacts:write" kind="primary" disabled={!file || running} onClick={() => void run()}>Import</Act>
      </div>
      {progress && (
        <div class="import-progress">
          <Progress value={progress.done} max={progress.total} label="Import progress" />
          <p class="small" role="status">{progress.done} of {progress.total} rows sent: {progress.created} created, {progress.refused.length} refused.</p>
          {progress.refused.length > 0 && !running && (
            <button type="button" onClick={async () => {
              const header = parseCsv(await file!.text())[0] ?? [];
              download('refused-rows.csv', toCsv([[...header, 'error'], ...progress.refused]));
            }}>Download refused rows</button>
          )}
        </div>
      )}
      <ErrorBox error={error} />
      {error && file ? <p class="small">Import the same file again to resume where it stopped.</p> : null}
    </section>
  );
}

export function ContactPage({ id }: { id: string }) {
  const contact = useLoad(() => get<S['Contact']>(`/contacts/${id}`), [id]);
  const comms = useLoad(() => get<S['CommunicationPage']>(`/contacts/${id}/communications?limit=50`), [id]);
  const c = contact.data;
  return (
    <>
      <h1 tabIndex={-1}>{c ? `${c.first_name} ${c.last_name ?? ''}` : 'Contact'}</h1>
      <ErrorBox error={contact.error} />
      {c && (
        <dl class="facts">
          <dt>Phone</dt><dd>{c.phone}</dd><dt>Email</dt><dd>{c.email ?? '—'}</dd><dt>Company</dt><dd>{c.company ?? '—'}</dd>
          <dt>Status</dt><dd>{c.status ?? '—'}</dd><dt>Tags</dt><dd>{c.tags.join(', ') || '—'}</dd>
          <dt>Custom fields</dt><dd><code>{JSON.stringify(c.custom_fields)}</code></dd><dt>Created</dt><dd>{when(c.created_at)}</dd>
        </dl>
      )}
      <h2>Communications</h2>
      <ErrorBox error={comms.error} />
      <ul>{comms.data?.data.map((m) => <li><span class="muted">{when(m.created_at)} · {m.direction} · {m.channel}:</span> {m.summary ?? m.message_id ?? ''}</li>)}</ul>
      {comms.data?.data.length === 0 && <p class="muted">None.</p>}
      <Notes id={id} />
      <Followups id={id} />
    </>
  );
}

function Notes({ id }: { id: string }) {
  const notes = useLoad(() => get<S['NotePage']>(`/contacts/${id}/notes?limit=50`), [id]);
  const [content, setContent] = useState('');
  const [error, setError] = useState<unknown>(null);
  return (
    <section aria-labelledby="notes-h">
      <h2 id="notes-h">Notes</h2>
      <ErrorBox error={notes.error} />
      <ul class="notes">{notes.data?.data.map((n) => <li><span class="muted">{when(n.created_at)}:</span> {n.content}</li>)}</ul>
      {notes.data?.data.length === 0 && <p class="muted">None.</p>}
      <form class="row" onSubmit={(e) => e.preventDefault()}>
        <Field label="New note"><textarea rows={2} value={content} onInput={(e) => setContent((e.target as HTMLTextAreaElement).value)} /></Field>
        <Act scope="contacts:write" disabled={!content.trim()} onClick={async () => {
          setError(null);
          try { await post(`/contacts/${id}/notes`, { content: content.trim() }); setContent(''); await notes.reload(); } catch (e) { setError(e); }
        }}>Add note</Act>
      </form>
      <ErrorBox error={error} />
    </section>
  );
}

function Followups({ id }: { id: string }) {
  const followups = useLoad(() => get<S['FollowupPage']>(`/contacts/${id}/followups?limit=50`), [id]);
  const [form, setForm] = useState({ title: '', due: '', notes: '' });
  const [error, setError] = useState<unknown>(null);
  const run = async (work: () => Promise<unknown>) => {
    setError(null);
    try { await work(); await followups.reload(); } catch (e) { setError(e); }
  };
  const input = (k: keyof typeof form) => (e: Event) => setForm({ ...form, [k]: (e.target as HTMLInputElement).value });
  return (
    <section aria-labelledby="fu-h">
      <h2 id="fu-h">Follow-ups</h2>
      <ErrorBox error={followups.error} />
      <ul class="followups">{followups.data?.data.map((f) => (
        <li class="row">
          <span>{f.done ? '✔ ' : ''}<strong>{f.title}</strong> <span class="muted">due {when(f.due_at)}</span>{f.notes ? ` — ${f.notes}` : ''}</span>
          <Act scope="contacts:write" onClick={() => run(() => patch(`/contacts/${id}/followups/${f.id}`, { done: !f.done }))}>{f.done ? `Reopen ${f.title}` : `Mark ${f.title} done`}</Act>
          <Act scope="contacts:write" onClick={() => run(() => del(`/contacts/${id}/followups/${f.id}`))}>{`Delete ${f.title}`}</Act>
        </li>
      ))}</ul>
      {followups.data?.data.length === 0 && <p class="muted">None.</p>}
      <form class="row filters" onSubmit={(e) => e.preventDefault()}>
        <Field label="Follow-up"><input value={form.title} onInput={input('title')} /></Field>
        <Field label="Due (your local time)"><input type="datetime-local" value={form.due} onInput={input('due')} /></Field>
        <Field label="Follow-up notes"><input value={form.notes} onInput={input('notes')} /></Field>
        <Act scope="contacts:write" disabled={!form.title.trim() || !form.due} onClick={() => run(async () => {
          await post(`/contacts/${id}/followups`, { title: form.title.trim(), due_at: new Date(form.due).toISOString(), ...(form.notes.trim() ? { notes: form.notes.trim() } : {}) });
          setForm({ title: '', due: '', notes: '' });
        })}>Add follow-up</Act>
      </form>
      <ErrorBox error={error} />
    </section>
  );
}
