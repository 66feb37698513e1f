import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface ReceivedRequest {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
  /** The client's port: requests with the same one came over the same connection. */
  remotePort: number | undefined;
}

/**
 * What the receiver does for a path: answer with a status, hang until the client gives up, answer
 * 200 with a body that never ends, or with a short body written in two parts 20 ms apart.
 */
export type Behaviour = number | 'hang' | 'flood' | 'nul' | 'two-parts';

/** A self-signed certificate for 127.0.0.1 and localhost, generated with the openssl CLI into `dir` (the caller removes it). */
export function makeCertificate(): { dir: string; certFile: string; keyFile: string; cert: string; key: string } {
  const dir = mkdtempSync(join(tmpdir(), 'wh-cert-'));
  const certFile = join(dir, 'cert.pem');
  const keyFile = join(dir, 'key.pem');
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
    '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost',
    '-keyout', keyFile, '-out', certFile,
  ], { stdio: 'ignore' });
  return { dir, certFile, keyFile, cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8') };
}

/**
 * A real HTTPS webhook receiver on 127.0.0.1 with a certificate generated at start. Records every
 * request; each path answers per `behave(path, ...)` (default 200).
 */
export async function startReceiver() {
  const certificate = makeCertificate();
  const received: ReceivedRequest[] = [];
  const behaviours = new Map<string, Behaviour>();
  const hanging = new Set<ServerResponse>();
  // Requests per path that are hanging right now (the client has not given up), and the most ever at once.
  const open = new Map<string, number>();
  const maxOpen = new Map<string, number>();
  const server: Server = createServer({ cert: certificate.cert, key: certificate.key }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const path = (req.url ?? '/').split('?')[0];
      received.push({ path, headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now(), remotePort: req.socket.remotePort });
      const behaviour = behaviours.get(path) ?? 200;
      if (behaviour === 'hang') {
        hanging.add(res);
        const now = (open.get(path) ?? 0) + 1;
        open.set(path, now);
        maxOpen.set(path, Math.max(now, maxOpen.get(path) ?? 0));
        res.on('close', () => open.set(path, (open.get(path) ?? 1) - 1));
        return;
      }
      if (behaviour === 'nul') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.end('ok\u0000done');
        return;
      }
      if (behaviour === 'two-parts') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('first part, ');
        setTimeout(() => res.end('second part'), 20);
        return;
      }
      if (behaviour === 'flood') {
        hanging.add(res);
        res.writeHead(200, { 'content-type': 'text/plain' });
        const chunk = Buffer.alloc(64 * 1024, 'y');
        const pump = () => { while (!res.destroyed && res.write(chunk)); };
        res.on('drain', pump);
        pump();
        return;
      }
      res.writeHead(behaviour, { 'content-type': 'text/plain' });
      res.end(behaviour >= 200 && behaviour < 300 ? `ok ${path}` : `failure ${behaviour} ${'x'.repeat(800)}`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return {
    caFile: certificate.certFile,
    port,
    received,
    url: (path: string) => `https://127.0.0.1:${port}${path}`,
    behave(path: string, behaviour: Behaviour) { behaviours.set(path, behaviour); },
    at: (path: string) => received.filter((r) => r.path === path),
    /** The most requests to a hanging path that were open at the same time. */
    maxOpenAt: (path: string) => maxOpen.get(path) ?? 0,
    async close() {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      rmSync(certificate.dir, { recursive: true, force: true });
    },
  };
}
export type Receiver = Awaited<ReturnType<typeof startReceiver>>;
