import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useState } from 'preact/hooks';
import { ApiError, can } from './api.ts';

/** Loads data for a page; `reload` runs it again. Errors are kept to be shown, never thrown. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): { data: T | null; error: unknown; loading: boolean; reload: () => Promise<void> } {
  const [state, setState] = useState<{ data: T | null; error: unknown; loading: boolean }>({ data: null, error: null, loading: true });
  const reload = useCallback(async () => {
    try { const data = await load(); setState({ data, error: null, loading: false }); } catch (error) { setState((s) => ({ ...s, error, loading: false })); }
  }, deps);
  useEffect(() => { setState((s) => ({ ...s, loading: true })); void reload(); }, [reload]);
  return { ...state, reload };
}

/** An API error with its message and request id; 400 details listed. */
export function ErrorBox({ error }: { error: unknown }) {
  if (!error) return null;
  if (error instanceof ApiError) {
    const details = Array.isArray(error.details) ? (error.details as { msg?: string; loc?: unknown[] }[]) : [];
    return (
      <div class="error" role="alert">
        <strong>{error.status ? `${error.status} ${error.code}` : error.code}:</strong> {error.message}
        {details.length > 0 && <ul>{details.map((d) => <li>{(d.loc ?? []).join('.')}: {d.msg}</li>)}</ul>}
        {error.requestId && <div class="muted">Request id: <code>{error.requestId}</code></div>}
      </div>
    );
  }
  return <div class="error" role="alert">{String((error as Error)?.message ?? error)}</div>;
}

/**
 * A button for an action that needs a scope: when the key lacks it, disabled and saying which scope,
 * never a button that fails.
 */
export function Act(props: { scope: string; onClick: () => void; children: ComponentChildren; disabled?: boolean; kind?: string; title?: string }) {
  const allowed = can(props.scope);
  return (
    <button type="button" class={props.kind ?? ''} disabled={!allowed || props.disabled} onClick={props.onClick}
      title={allowed ? props.title : `Needs the ${props.scope} scope`} data-needs={allowed ? undefined : props.scope}>
      {props.children}{!allowed && <span class="needs"> (needs {props.scope})</span>}
    </button>
  );
}

/** A modal that asks before an action; the action's error is shown inside it. */
export function Confirm(props: { title: string; children?: ComponentChildren; confirmLabel: string; onConfirm: () => Promise<void>; onClose: () => void }) {
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  useEffect(() => { (document.querySelector('.modal button.primary') as HTMLButtonElement | null)?.focus(); }, []);
  return (
    <div class="backdrop">
      <div class="modal" role="dialog" aria-modal="true" aria-labelledby="modal-title" onKeyDown={(e) => { if (e.key === 'Escape') props.onClose(); }}>
        <h2 id="modal-title">{props.title}</h2>
        {props.children}
        <ErrorBox error={error} />
        <div class="row">
          <button type="button" class="primary" disabled={busy} onClick={async () => {
            setBusy(true); setError(null);
            try { await props.onConfirm(); props.onClose(); } catch (e) { setError(e); } finally { setBusy(false); }
          }}>{props.confirmLabel}</button>
          <button type="button" onClick={props.onClose}>Cancel</button>
        </div>
      </div>
    </div>
  );
}

export function Pager({ pagination, onPage }: { pagination?: { page: number; total_pages: number; total_items: number; has_next: boolean; has_prev: boolean }; onPage: (p: number) => void }) {
  if (!pagination) return null;
  return (
    <nav class="row pager" aria-label="Pages">
      <button type="button" disabled={!pagination.has_prev} onClick={() => onPage(pagination.page - 1)}>Previous</button>
      <span>Page {pagination.page} of {Math.max(1, pagination.total_pages)} ({pagination.total_items} items)</span>
      <button type="button" disabled={!pagination.has_next} onClick={() => onPage(pagination.page + 1)}>Next</button>
    </nav>
  );
}

export function Status({ value }: { value: string | null | undefined }) {
  return <span class={`badge s-${String(value ?? '').toLowerCase()}`}>{value ?? '—'}</span>;
}

export function Progress({ value, max, label }: { value: number; max: number; label: string }) {
  const pct = max > 0 ? Math.min(100, Math.round((value / max) * 100)) : 0;
  return (
    <div class="progress" role="progressbar" aria-label={label} aria-valuemin={0} aria-valuemax={100} aria-valuenow={pct}>
      <div style={{ width: `${pct}%` }} /><span>{pct}%</span>
    </div>
  );
}

export const when = (iso: string | null | undefined) => (iso ? new Date(iso).toLocaleString() : '—');

export function Field(props: { label: string; children: ComponentChildren; hint?: string }) {
  return <label class="field"><span>{props.label}</span>{props.children}{props.hint && <small class="muted">{props.hint}</small>}</label>;
}

/** Text of rows as CSV (quoted where needed). */
export function toCsv(rows: (string | number | null | undefined)[][]): string {
  return rows.map((r) => r.map((v) => {
    const s = v === null || v === undefined ? '' : String(v);
    return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  }).join(',')).join('\r\n') + '\r\n';
}

/** A small RFC 4180 CSV reader (quoted fields, doubled quotes, CRLF). */
export function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = []; let field = ''; let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i++; } else if (c === '"') quoted = false; else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') { row.push(field); field = ''; }
    else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') i++;
      row.push(field); field = '';
      if (row.some((f) => f !== '')) rows.push(row);
      row = [];
    } else field += c;
  }
  row.push(field);
  if (row.some((f) => f !== '')) rows.push(row);
  return rows;
}
