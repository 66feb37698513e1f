import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { createUpstreamClient } from '../../src/upstream/client.ts';

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** The media URL an upstream names is fetched with the account's token: only from the upstream itself or Meta's hosts. */
describe('upstream client: media download', () => {
  const seen: (string | undefined)[] = [];
  const elsewhere = createServer((req, res) => { seen.push(req.headers.authorization); res.end('stolen'); });
  let elsewhereUrl = '';
  const upstream = createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    if (req.url?.startsWith('/v21.0/FOREIGN')) { res.end(JSON.stringify({ url: `${elsewhereUrl}/x`, mime_type: 'image/jpeg' })); return; }
    if (req.url?.startsWith('/v21.0/PROXY404')) { res.statusCode = 404; res.end('not json'); return; }
    res.statusCode = 400;
    res.end(JSON.stringify({ error: { code: 100, error_subcode: 33, message: 'Unsupported get request.' } }));
  });
  afterAll(async () => {
    await new Promise((r) => elsewhere.close(r));
    await new Promise((r) => upstream.close(r));
  });

  it('refuses a URL on another host without sending it the token; an unknown media id is gone', async () => {
    elsewhereUrl = await listen(elsewhere);
    const base = await listen(upstream);
    const client = createUpstreamClient({ baseUrl: `${base}/v21.0`, timeoutMs: 2000, connections: 2 });
    const account = { wabaId: 'w', phoneNumberId: 'p', accessToken: 'secret-token' };
    const foreign = await client.downloadMedia(account, 'FOREIGN');
    expect(foreign).toMatchObject({ kind: 'rejected', error: { title: expect.stringContaining('Refused to fetch media') } });
    expect(seen).toEqual([]);
    expect(await client.downloadMedia(account, 'UNKNOWN')).toEqual({ kind: 'accepted', value: { gone: true } });
    // A 404 without a Graph error body (a proxy) is not proof the media is gone: it is a failure to report.
    expect((await client.downloadMedia(account, 'PROXY404')).kind).toBe('rejected');
    await client.close();
  });
});
