import { useEffect, useRef, useState } from 'preact/hooks';
import { can, get, patch, post, put, type S } from '../api.ts';
import { Act, Confirm, ErrorBox, Field, useLoad } from '../ui.tsx';
import { PreflightSummary, scheduledAt } from './campaign.tsx';
import { mappable, TemplateBubble } from './templates-render.tsx';

const CONTACT_FIELDS = ['first_name', 'last_name', 'phone', 'email', 'company', 'job_title', 'status', 'source'];
type Param = { kind: 'contact_field' | 'static'; field: string; value: string; fallback: string };
const list = (s: string) => s.split(',').map((x) => x.trim()).filter(Boolean);
/** How long the builder waits after the last edit before saving the draft. */
const SAVE_AFTER_MS = 400;

/**
 * The builder saves as the person edits: a draft is made once it has a name and a template, then
 * every change is saved (PUT audience, PATCH name, mapping and batch size) a moment after the last
 * edit, and the previews, which the API computes for a saved campaign, reload after each save.
 */
export function BuilderPage() {
  const templates = useLoad(() => get<S['TemplatePage']>('/templates?limit=100'), []);
  // custom_fields keys, from the newest contacts (the API has no list of them).
  const keys = useLoad(async () => {
    const page = await get<S['ContactPage']>('/contacts?limit=100');
    return [...new Set(page.data.flatMap((c) => Object.keys(c.custom_fields ?? {})))].sort();
  }, []);
  const [name, setName] = useState('');
  const [templateId, setTemplateId] = useState('');
  const [groups, setGroups] = useState('');
  const [sources, setSources] = useState('');
  const [batch, setBatch] = useState(50);
  const [params, setParams] = useState<Record<string, Param>>({});
  const [campaign, setCampaign] = useState<S['Campaign'] | null>(null);
  const [version, setVersion] = useState(0);
  const [saving, setSaving] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const savedKey = useRef<string | null>(null);
  const saved = useRef<{ id: string; name: string; audience: string; mapping: string; batch: number } | null>(null);
  const template = templates.data?.data.find((t) => t.id === templateId) ?? null;
  const slots = template ? mappable(template) : [];
  const fields = [...CONTACT_FIELDS, ...(keys.data ?? []).map((k) => `custom_fields.${k}`)];
  const param = (slot: string): Param => params[slot] ?? { kind: 'contact_field', field: 'first_name', value: '', fallback: '' };
  const setParam = (slot: string, change: Partial<Param>) => setParams((p) => ({ ...p, [slot]: { ...param(slot), ...change } }));

  const mapping = slots.length === 0 ? null : {
    components: slots.map((s) => ({
      type: s.type, ...(s.type === 'header' ? { format: 'TEXT' } : {}),
      parameters: s.names.map((n) => {
        const p = param(`${s.type}.${n}`);
        return p.kind === 'static' ? { kind: 'static', value: p.value } : { kind: 'contact_field', field: p.field, ...(p.fallback ? { fallback: p.fallback } : {}) };
      }),
    })),
  };
  const audience = { groups: list(groups), sources: list(sources) };
  const want = { name: name.trim(), audience: JSON.stringify(audience), mapping: JSON.stringify(mapping), batch };
  const key = JSON.stringify([templateId, want]);
  const ready = can('campaigns:write') && want.name !== '' && Boolean(template);
  const dirty = ready && key !== savedKey.current;

  useEffect(() => {
    if (!dirty || saving) return;
    const timer = setTimeout(async () => {
      setSaving(true); setError(null);
      try {
        const last = saved.current;
        if (!last) {
          const made = await post<S['Campaign']>('/campaigns', { name: want.name, template_id: templateId, batch_size: batch, audience, ...(mapping ? { variable_mapping: mapping } : {}) } as S['CampaignCreate']);
          setCampaign(made);
          saved.current = { id: made.id, ...want };
        } else {
          if (want.audience !== last.audience) await put(`/campaigns/${last.id}/audience`, audience);
          const change = {
            ...(want.name !== last.name ? { name: want.name } : {}),
            ...(want.mapping !== last.mapping && mapping ? { variable_mapping: mapping } : {}),
            ...(want.batch !== last.batch ? { batch_size: batch } : {}),
          };
          if (Object.keys(change).length > 0) await patch(`/campaigns/${last.id}`, change);
          saved.current = { id: last.id, ...want };
        }
        setVersion((v) => v + 1);
      } catch (e) { setError(e); }
      // Marked saved even when refused, so a refused edit is not retried until the next edit.
      savedKey.current = key;
      setSaving(false);
    }, SAVE_AFTER_MS);
    return () => clearTimeout(timer);
  }, [key, ready, saving]);

  const status = !can('campaigns:write') ? 'Drafts need the campaigns:write scope.'
    : !ready ? 'Give the campaign a name and a template: it is then saved as a draft as you edit, and the previews follow.'
    : saving || dirty ? 'Saving the draft…' : error ? 'The last change was not saved (see below).' : 'Draft saved.';
  return (
    <>
      <h1 tabIndex={-1}>New campaign</h1>
      <ErrorBox error={templates.error ?? keys.error} />
      <form class="card" onSubmit={(e) => e.preventDefault()}>
        <Field label="Name"><input required maxLength={120} value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} /></Field>
        <Field label="Template (approved)" hint={campaign ? 'The draft is saved with this template; start a new campaign for another.' : undefined}>
          <select required value={templateId} disabled={Boolean(campaign)} onChange={(e) => setTemplateId((e.target as HTMLSelectElement).value)}>
            <option value="">Choose a template…</option>
            {templates.data?.data.map((t) => <option value={t.id}>{t.template_name} ({t.language}, {t.category})</option>)}
          </select>
        </Field>
        {template && <TemplateBubble components={template.components} />}
        <fieldset>
          <legend>Audience</legend>
          <Field label="Groups (contact tags, comma separated)"><input value={groups} onInput={(e) => setGroups((e.target as HTMLInputElement).value)} /></Field>
          <Field label="Sources (comma separated: api, bulk, website…)"><input value={sources} onInput={(e) => setSources((e.target as HTMLInputElement).value)} /></Field>
        </fieldset>
        {slots.length > 0 && (
          <fieldset>
            <legend>Variable mapping</legend>
            {slots.flatMap((s) => s.names.map((n) => {
              const slot = `${s.type}.${n}`; const p = param(slot);
              return (
                <div class="row mapping" data-slot={slot}>
                  <strong>{s.type} {`{{${n}}}`}</strong>
                  <Field label={`Kind for ${slot}`}>
                    <select value={p.kind} onChange={(e) => setParam(slot, { kind: (e.target as HTMLSelectElement).value as Param['kind'] })}>
                      <option value="contact_field">contact field</option><option value="static">same text for everyone</option>
                    </select>
                  </Field>
                  {p.kind === 'contact_field'
                    ? <>
                        <Field label={`Field for ${slot}`}><select value={p.field} onChange={(e) => setParam(slot, { field: (e.target as HTMLSelectElement).value })}>{fields.map((f) => <option value={f}>{f}</option>)}</select></Field>
                        <Field label={`Fallback for ${slot}`}><input value={p.fallback} onInput={(e) => setParam(slot, { fallback: (e.target as HTMLInputElement).value })} /></Field>
                      </>
                    : <Field label={`Text for ${slot}`}><input value={p.value} onInput={(e) => setParam(slot, { value: (e.target as HTMLInputElement).value })} /></Field>}
                </div>
              );
            }))}
          </fieldset>
        )}
        <Field label="Batch size"><input type="number" min={1} max={1000} value={batch} onInput={(e) => setBatch(Number((e.target as HTMLInputElement).value))} /></Field>
        <p class="small muted save-state" role="status">{status}</p>
        <ErrorBox error={error} />
      </form>
      {campaign && <Previews campaign={campaign} version={version} busy={saving || dirty}
        fields={[...new Set(slots.flatMap((s) => s.names.map((n) => param(`${s.type}.${n}`))).filter((p) => p.kind === 'contact_field').map((p) => p.field))]} />}
    </>
  );
}

function Previews({ campaign, version, busy, fields }: { campaign: S['Campaign']; version: number; busy: boolean; fields: string[] }) {
  const preview = useLoad(() => get<S['AudiencePreview']>(`/campaigns/${campaign.id}/audience/preview`), [campaign.id, version]);
  const coverage = useLoad(() => fields.length ? post<S['FieldCoverage']>(`/campaigns/${campaign.id}/audience/field-coverage`, { fields }) : Promise.resolve(null), [campaign.id, version, fields.join()]);
  const [sample, setSample] = useState('');
  const render = useLoad(() => post<S['RenderPreview']>(`/campaigns/${campaign.id}/preview`, sample ? { sample_contact_id: sample } : {}), [campaign.id, version, sample]);
  const [confirming, setConfirming] = useState(false);
  const [scheduling, setScheduling] = useState(false);
  const [at, setAt] = useState('');
  const [detail, setDetail] = useState<S['CampaignDetail'] | null>(null);
  useEffect(() => { if (confirming) get<S['CampaignDetail']>(`/campaigns/${campaign.id}`).then(setDetail, () => {}); }, [confirming]);
  return (
    <section aria-labelledby="previews-h" class="card" aria-busy={busy}>
      <h2 id="previews-h">Previews</h2>
      <ErrorBox error={preview.error} />
      {preview.data && (
        <>
          <p><strong class="audience-total">{preview.data.total}</strong> recipients (excluded: {preview.data.excluded.opted_out} opted out, {preview.data.excluded.marketing_blocked_country} blocked country, {preview.data.excluded.frequency_cap} frequency cap)</p>
          {preview.data.sample.length > 0 && <p class="small">Sample: {preview.data.sample.map((c) => `${c.first_name} ${c.phone}`).join(', ')}</p>}
          <Field label="Sample contact for the render preview">
            <select value={sample} onChange={(e) => setSample((e.target as HTMLSelectElement).value)}>
              <option value="">first of the audience</option>
              {preview.data.sample.map((c) => <option value={c.id}>{c.first_name} {c.phone}</option>)}
            </select>
          </Field>
        </>
      )}
      <ErrorBox error={coverage.error} />
      {coverage.data && (
        <table class="coverage">
          <caption>Field coverage</caption>
          <thead><tr><th scope="col">Field</th><th scope="col">Present</th><th scope="col">Missing</th></tr></thead>
          <tbody>{Object.entries(coverage.data.coverage).map(([f, c]) => <tr><td>{f}</td><td>{c.present}</td><td>{c.missing}</td></tr>)}</tbody>
        </table>
      )}
      <ErrorBox error={render.error} />
      {render.data && (
        <div class="bubble render-preview" aria-label="Render preview">
          {render.data.resolved_components.map((c) => <p><span class="muted">{c.type}: </span>{c.text}</p>)}
        </div>
      )}
      <div class="row">
        <Act scope="campaigns:send" kind="primary" disabled={busy} onClick={() => setConfirming(true)}>Review pre-flight and send</Act>
        <Act scope="campaigns:send" disabled={busy} onClick={() => setScheduling(true)}>Schedule…</Act>
        <a href={`#/campaigns/${campaign.id}`}>Open the campaign page</a>
      </div>
      {scheduling && (
        <Confirm title={`Schedule ${campaign.name}`} confirmLabel="Yes, schedule" onClose={() => setScheduling(false)}
          onConfirm={async () => { await post(`/campaigns/${campaign.id}/schedule`, { scheduled_at: scheduledAt(at) }); location.hash = `#/campaigns/${campaign.id}`; }}>
          <Field label="Start at (your local time)"><input type="datetime-local" required value={at} onInput={(e) => setAt((e.target as HTMLInputElement).value)} /></Field>
        </Confirm>
      )}
      {confirming && (
        <Confirm title={`Send ${detail?.name ?? campaign.name}?`} confirmLabel="Yes, send now" onClose={() => setConfirming(false)}
          onConfirm={async () => { await post(`/campaigns/${campaign.id}/send`); location.hash = `#/campaigns/${campaign.id}`; }}>
          {detail ? <PreflightSummary p={detail.preflight} /> : <p>Loading the pre-flight…</p>}
        </Confirm>
      )}
    </section>
  );
}
