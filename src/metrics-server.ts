import { createServer, type Server } from 'node:http';
import type { Metrics } from './metrics.ts';

export interface MetricsServer {
  port: number;
  close(): Promise<void>;
}

/**
 * The Prometheus scrape target of METRICS_PORT: `GET /metrics` and nothing else, without auth (it
 * binds HOST like the API, loopback on the embedded default), apart from the API's listener so a
 * worker process has one too. Rejects with the listen error (EADDRINUSE, ...).
 */
export async function startMetricsServer(metrics: Metrics, options: { port: number; host: string }): Promise<MetricsServer> {
  const server = createServer((request, response) => {
    const path = request.url?.split('?')[0];
    if (path !== '/metrics') return void response.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
    if (request.method !== 'GET' && request.method !== 'HEAD') return void response.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('method not allowed\n');
    metrics.render().then(
      ({ contentType, body }) => response.writeHead(200, { 'content-type': contentType }).end(request.method === 'HEAD' ? undefined : body),
      () => response.writeHead(500, { 'content-type': 'text/plain' }).end('metrics could not be collected\n'),
    );
  });
  await listen(server, options.port, options.host);
  const address = server.address();
  return {
    port: address && typeof address === 'object' ? address.port : options.port,
    close: () => new Promise((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}
