import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { ApiError, call, onNotice, session, whenUnauthorised } from './api.ts';
import { ErrorBox } from './ui.tsx';
import { CampaignsPage } from './pages/campaigns.tsx';
import { CampaignPage } from './pages/campaign.tsx';
import { BuilderPage } from './pages/builder.tsx';
import { ContactsPage, ContactPage } from './pages/contacts.tsx';
import { TemplatesPage } from './pages/templates.tsx';
import { MessagesPage } from './pages/messages.tsx';
import { WebhooksPage } from './pages/webhooks.tsx';
import './style.css';

const route = () => location.hash.replace(/^#/, '') || '/campaigns';

/** The key's grants, from the console's own session endpoint (the public API has none). */
async function identify(key: string): Promise<{ scopes: string[] }> {
  const response = await fetch('/console/session', { headers: { authorization: `Bearer ${key}` } });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new ApiError(body?.error?.message ?? `HTTP ${response.status}`, response.status, body?.error?.code ?? 'ERROR', response.headers.get('x-request-id'));
  return body;
}

function SignIn({ onSignedIn, error: initial }: { onSignedIn: () => void; error?: unknown }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState<unknown>(initial ?? null);
  return (
    <main id="main" class="signin">
      <h1>Messaging console</h1>
      <form onSubmit={async (e) => {
        e.preventDefault(); setError(null);
        try {
          const who = await identify(key.trim());
          session.set(key.trim()); session.scopes = who.scopes; onSignedIn();
        } catch (err) { setError(err); }
      }}>
        <label class="field"><span>API key</span>
          <input type="password" name="api-key" autocomplete="off" required value={key} onInput={(e) => setKey((e.target as HTMLInputElement).value)} placeholder="svc_sk_live_…" />
          <small class="muted">Kept for this browser tab only (sessionStorage); closing the tab or signing out forgets it.</small>
        </label>
        <button type="submit" class="primary">Sign in</button>
      </form>
      <ErrorBox error={error} />
      <p class="muted">An operator can also give you a one-time sign-in link (valid 15 minutes).</p>
    </main>
  );
}

function Link({ token, onSignedIn }: { token: string; onSignedIn: () => void }) {
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    // The link leaves the address bar and history at once: it works only once anyway.
    history.replaceState(null, '', `${location.pathname}#/campaigns`);
    (async () => {
      try {
        const res = await call('POST', '/console/session/link', { token }, { base: '', noAuth: true });
        const body = await res.json() as { key: string; scopes: string[] };
        session.set(body.key); session.scopes = body.scopes; onSignedIn();
      } catch (e) { setError(e); }
    })();
  }, [token]);
  return error ? <SignIn onSignedIn={onSignedIn} error={error} /> : <main id="main"><p>Signing in…</p></main>;
}

const NAV: [string, string][] = [['/campaigns', 'Campaigns'], ['/contacts', 'Contacts'], ['/templates', 'Templates'], ['/messages', 'Messages'], ['/webhooks', 'Webhooks']];

function App() {
  const [path, setPath] = useState(route());
  const [ready, setReady] = useState(false);
  const [signedIn, setSignedIn] = useState(Boolean(session.key));
  const [notice, setNotice] = useState<string | null>(null);
  const [expired, setExpired] = useState<unknown>(null);
  useEffect(() => { const h = () => setPath(route()); addEventListener('hashchange', h); return () => removeEventListener('hashchange', h); }, []);
  useEffect(() => onNotice(setNotice), []);
  useEffect(() => { whenUnauthorised((e) => { session.set(null); setExpired(e); setSignedIn(false); }); }, []);
  useEffect(() => {
    if (!session.key) { setReady(true); return; }
    identify(session.key).then((who) => { session.scopes = who.scopes; setReady(true); }, (e) => { session.set(null); setExpired(e); setSignedIn(false); setReady(true); });
  }, [signedIn]);
  useEffect(() => { document.querySelector<HTMLElement>('main h1')?.focus(); }, [path]);

  const link = /^\/link\/(.+)$/.exec(path);
  if (link) return <Link token={link[1]} onSignedIn={() => { setExpired(null); setSignedIn(true); setPath('/campaigns'); }} />;
  if (!signedIn) return <SignIn error={expired} onSignedIn={() => { setExpired(null); setSignedIn(true); if (!location.hash) location.hash = '#/campaigns'; }} />;
  if (!ready) return <main id="main"><p>Loading…</p></main>;

  const parts = path.split('/').filter(Boolean);
  let page;
  if (parts[0] === 'campaigns' && parts[1] === 'new') page = <BuilderPage />;
  else if (parts[0] === 'campaigns' && parts[1]) page = <CampaignPage id={parts[1]} />;
  else if (parts[0] === 'contacts' && parts[1]) page = <ContactPage id={parts[1]} />;
  else if (parts[0] === 'contacts') page = <ContactsPage />;
  else if (parts[0] === 'templates') page = <TemplatesPage />;
  else if (parts[0] === 'messages') page = <MessagesPage />;
  else if (parts[0] === 'webhooks') page = <WebhooksPage />;
  else page = <CampaignsPage />;

  return (
    <>
      <a class="skip" href="#main" onClick={(e) => { e.preventDefault(); document.getElementById('main')?.focus(); }}>Skip to content</a>
      <header class="top">
        <span class="brand">Messaging console</span>
        <nav aria-label="Main">
          {NAV.map(([href, label]) => <a href={`#${href}`} aria-current={path.startsWith(href) ? 'page' : undefined}>{label}</a>)}
        </nav>
        <button type="button" class="signout" onClick={async () => {
          await call('DELETE', '/console/session', undefined, { base: '' }).catch(() => {});
          session.set(null); session.scopes = []; setSignedIn(false);
        }}>Sign out</button>
      </header>
      {notice && <div class="notice" role="status">{notice}</div>}
      <main id="main" tabIndex={-1}>{page}</main>
    </>
  );
}

render(<App />, document.getElementById('app')!);
