import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';

export interface Exchange {
  method: string;
  path: string;
  headers: Record<string, string | string[] | undefined>;
  status: number;
  /** When the service answered (ms since the epoch). */
  at: number;
  /** The answer was thrown away and the client's connection cut (a response lost on the network). */
  cut: boolean;
}

/**
 * A real HTTP hop between the SDK and the service: forwards every request, records it with the
 * service's status, and on demand loses the next response (closes the client's connection after the
 * service has handled the request), the way a network failure would.
 */
export async function startRecordingProxy(target: string) {
  const exchanges: Exchange[] = [];
  let responsesToLose = 0;
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const { host: _host, connection: _connection, ...headers } = req.headers;
    const upstream = await request(`${target}${req.url}`, {
      method: req.method as 'GET', headers: headers as Record<string, string>, body: chunks.length > 0 ? Buffer.concat(chunks) : undefined,
    });
    const body = Buffer.from(await upstream.body.arrayBuffer());
    const cut = responsesToLose > 0;
    exchanges.push({ method: req.method!, path: req.url!, headers: req.headers, status: upstream.statusCode, at: Date.now(), cut });
    if (cut) {
      responsesToLose--;
      req.socket.destroy();
      return;
    }
    const { 'transfer-encoding': _te, connection: _c, 'keep-alive': _ka, ...answer } = upstream.headers;
    res.writeHead(upstream.statusCode, { ...answer, 'content-length': String(body.length) });
    res.end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    exchanges,
    loseNextResponses(count = 1) { responsesToLose = count; },
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}
export type RecordingProxy = Awaited<ReturnType<typeof startRecordingProxy>>;
