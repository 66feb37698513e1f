import { useState } from 'preact/hooks';
import { get, post, qs, type S } from '../api.ts';
import { Act, ErrorBox, Field, Pager, Status, useLoad, when } from '../ui.tsx';
import { TemplateBubble, variables } from './templates-render.tsx';

const MADE = 'console.templates';
const STATUSES = ['', 'draft', 'pending', 'approved', 'rejected', 'disabled'];

/**
 * The API lists approved templates only (spec 4.2), so the drafts made in this tab are kept for the
 * tab (sessionStorage) and shown beside them until the list has them.
 */
export function TemplatesPage() {
  const [page, setPage] = useState(1);
  const [status, setStatus] = useState('');
  const { data, error, reload } = useLoad(() => get<S['TemplatePage']>(`/templates${qs({ page, limit: 20 })}`), [page]);
  const [made, setMadeState] = useState<S['Template'][]>(() => JSON.parse(sessionStorage.getItem(MADE) ?? '[]'));
  const setMade = (update: (m: S['Template'][]) => S['Template'][]) => setMadeState((m) => { const next = update(m); sessionStorage.setItem(MADE, JSON.stringify(next)); return next; });
  const shown = [...made.filter((m) => !data?.data.some((t) => t.id === m.id)), ...(data?.data ?? [])].filter((t) => !status || t.status === status);
  return (
    <>
      <h1 tabIndex={-1}>Templates</h1>
      <ErrorBox error={error} />
      <p class="small muted">The API lists approved templates; drafts made in this tab are shown here until they are approved.</p>
      <Field label="Status">
        <select value={status} onChange={(e) => setStatus((e.target as HTMLSelectElement).value)}>{STATUSES.map((s) => <option value={s}>{s || 'all'}</option>)}</select>
      </Field>
      <div class="cards">
        {shown.map((t) => <TemplateCard template={t} onChange={(nt) => { setMade((m) => m.map((x) => (x.id === nt.id ? nt : x))); void reload(); }} />)}
      </div>
      {shown.length === 0 && data && <p class="muted">No templates{status ? ` in status ${status}` : ''}.</p>}
      {data && <Pager pagination={data.pagination} onPage={setPage} />}
      <CreateTemplate onCreated={(t) => setMade((m) => [t, ...m])} />
    </>
  );
}

function TemplateCard({ template: t, onChange }: { template: S['Template']; onChange: (t: S['Template']) => void }) {
  const [error, setError] = useState<unknown>(null);
  return (
    <article class="card template" aria-label={t.template_name}>
      <div class="row between"><strong>{t.template_name}</strong><Status value={t.status} /></div>
      <p class="small muted">{t.category} · {t.language} · quality {t.quality_score} · {when(t.created_at)}</p>
      <TemplateBubble components={t.components} />
      {t.rejected_reason && <p class="error">Rejected: {t.rejected_reason}</p>}
      {t.status === 'draft' && <Act scope="templates:write" onClick={async () => { setError(null); try { onChange(await post<S['Template']>(`/templates/${t.id}/submit`)); } catch (e) { setError(e); } }}>Submit for review</Act>}
      <ErrorBox error={error} />
    </article>
  );
}

function CreateTemplate({ onCreated }: { onCreated: (t: S['Template']) => void }) {
  const [f, setF] = useState({ name: '', language: 'en_US', category: 'MARKETING', header: '', body: '', footer: '', samples: '' });
  const [error, setError] = useState<unknown>(null);
  const input = (k: keyof typeof f) => (e: Event) => setF({ ...f, [k]: (e.target as HTMLInputElement).value });
  const create = async () => {
    setError(null);
    const vars = variables(f.body);
    const samples = f.samples.split(',').map((s) => s.trim()).filter(Boolean);
    const components: Record<string, unknown>[] = [];
    if (f.header) components.push({ type: 'HEADER', format: 'TEXT', text: f.header });
    components.push({ type: 'BODY', text: f.body, ...(vars.length ? { example: { body_text: [vars.map((_, i) => samples[i] ?? `sample${i + 1}`)] } } : {}) });
    if (f.footer) components.push({ type: 'FOOTER', text: f.footer });
    try { onCreated(await post<S['Template']>('/templates', { template_name: f.name, language: f.language, category: f.category, components })); } catch (e) { setError(e); }
  };
  return (
    <form class="card" aria-labelledby="new-t-h" onSubmit={(e) => { e.preventDefault(); void create(); }}>
      <h2 id="new-t-h">New template (draft)</h2>
      <Field label="Name (lowercase, digits, _)"><input required pattern="[a-z0-9_]+" value={f.name} onInput={input('name')} /></Field>
      <div class="row">
        <Field label="Language"><input required value={f.language} onInput={input('language')} /></Field>
        <Field label="Category"><select value={f.category} onChange={input('category')}><option>MARKETING</option><option>UTILITY</option><option>AUTHENTICATION</option></select></Field>
      </div>
      <Field label="Header text (optional)"><input value={f.header} onInput={input('header')} /></Field>
      <Field label="Body" hint="Variables as {{1}}, {{2}}…"><textarea required rows={3} value={f.body} onInput={input('body')} /></Field>
      <Field label="Sample values for the variables (comma separated)"><input value={f.samples} onInput={input('samples')} /></Field>
      <Field label="Footer (optional)"><input value={f.footer} onInput={input('footer')} /></Field>
      <Act scope="templates:write" kind="primary" onClick={() => void create()}>Create draft</Act>
      <ErrorBox error={error} />
    </form>
  );
}
