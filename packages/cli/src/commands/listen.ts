import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage } from 'node:http';
import type { Command } from 'commander';
import { request } from 'undici';
import { requireApiKey } from '../config.ts';
import { CliError, EXIT } from '../exit-codes.ts';
import { Api, PUBLIC_PREFIX } from '../http.ts';
import { list, positiveInt, type Runner } from './shared.ts';

/** Request headers not passed on: they describe the hop to us, not the delivery. */
const HOP_HEADERS = new Set(['host', 'connection', 'content-length', 'transfer-encoding', 'keep-alive']);

interface ListenFlags { forwardTo?: string; events?: string[]; port?: number }

export function registerListenCommand(program: Command, run: Runner): void {
  program.command('listen')
    .description('receive the tenant\'s webhook events locally: a temporary endpoint pointing at a local HTTPS receiver (the service\'s development certificate), each delivery verified, printed and forwarded; the endpoint is deleted on exit')
    .option('--forward-to <url>', 'POST each verified delivery (raw body and headers) to this URL')
    .option('--events <list>', 'comma-separated event types (default: all)', list)
    .option('--port <n>', 'local port of the receiver (default: any free port)', positiveInt)
    .action(run(async (config, opts: ListenFlags) => {
      // The service's own definitions, so the CLI and the service cannot disagree on them; loaded
      // here, not at every start of the CLI (the event list comes with the database layer).
      const [{ devCaFiles }, { EVENT_TYPES }, { verifyWebhookSignature }] = await Promise.all([
        import('../../../../src/crypto/dev-ca.ts'), import('../../../../src/events/events.ts'), import('../../../../src/modules/webhooks/verify-signature.ts'),
      ]);
      const api = new Api(config.url, PUBLIC_PREFIX, requireApiKey(config));
      const files = devCaFiles(config.dataDir);
      let tls: { cert: Buffer; key: Buffer };
      try {
        tls = { cert: readFileSync(files.certFile), key: readFileSync(files.keyFile) };
      } catch {
        throw new CliError(`no development certificate in ${files.dir}: start the service outside production with this DATA_DIR, or pass --data-dir`, EXIT.USAGE);
      }
      const events = opts.events ?? [...EVENT_TYPES];
      let secret = '';
      const line = (text: string, record: Record<string, unknown>) => process.stdout.write(config.json ? `${JSON.stringify(record)}\n` : `${text}\n`);

      const server: Server = createServer(tls, (req, res) => {
        readBody(req).then(async (rawBody) => {
          const receivedAt = new Date().toISOString();
          const deliveryId = String(req.headers['x-service-delivery-id'] ?? '');
          if (!verifyWebhookSignature({ secret, headers: req.headers, rawBody })) {
            line(`${receivedAt}  REJECTED  bad or stale signature  delivery ${deliveryId}`, { received_at: receivedAt, verified: false, delivery_id: deliveryId });
            res.writeHead(400).end('bad signature');
            return;
          }
          let envelope: { id?: string; type?: string } = {};
          try { envelope = JSON.parse(rawBody.toString('utf8')); } catch { /* signed but not JSON: forwarded as is */ }
          const forwarded = opts.forwardTo ? await forward(opts.forwardTo, req, rawBody) : null;
          const status = forwarded === null ? 200 : forwarded.status ?? 502;
          line(`${receivedAt}  ${envelope.type ?? '?'}  ${envelope.id ?? ''}${opts.forwardTo ? `  -> ${opts.forwardTo} [${forwarded?.status ?? forwarded?.error}]` : ''}`, {
            received_at: receivedAt, verified: true, event_id: envelope.id, type: envelope.type, delivery_id: deliveryId,
            ...(opts.forwardTo ? { forward_status: forwarded?.status ?? null, forward_error: forwarded?.error ?? null } : {}),
          });
          // The forward target's answer goes back to the service, so its retries behave as they would for that app.
          res.writeHead(status >= 200 && status < 300 ? status : 502, { 'content-type': 'text/plain' }).end(forwarded?.error ?? 'ok');
        }).catch((err) => { res.writeHead(500).end(String(err)); });
      });
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(opts.port ?? 0, '127.0.0.1', () => resolve());
      });
      const port = (server.address() as { port: number }).port;

      let endpointId: string | undefined;
      let stopping: Promise<void> | undefined;
      const stop = () => stopping ??= (async () => {
        if (endpointId) {
          await api.call('DELETE', `/webhooks/${endpointId}`).catch((err) => process.stderr.write(`msvc: could not delete endpoint ${endpointId}: ${(err as Error).message}\n`));
          process.stderr.write(`Deleted endpoint ${endpointId}.\n`);
        }
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
        await api.close();
      })();
      try {
        const created = await api.call<{ data: { id: string; url: string }; signing_secret: string }>('POST', '/webhooks', {
          body: { url: `https://127.0.0.1:${port}/`, events, description: 'msvc listen (temporary; deleted when it exits)' },
        });
        endpointId = created.data.id;
        secret = created.signing_secret;
        const ready = { endpoint_id: endpointId, url: created.data.url, events, forward_to: opts.forwardTo ?? null, signing_secret: secret };
        process.stderr.write(config.json
          ? `${JSON.stringify({ ready })}\n`
          : `Ready. Endpoint ${endpointId} delivers to ${created.data.url}${opts.forwardTo ? `, forwarded to ${opts.forwardTo}` : ''}. Signing secret ${secret}. Ctrl-C to stop.\n`);
      } catch (err) {
        await stop();
        throw err;
      }
      await new Promise<void>((resolve) => {
        const onSignal = () => { process.off('SIGINT', onSignal); process.off('SIGTERM', onSignal); void stop().then(resolve); };
        process.on('SIGINT', onSignal);
        process.on('SIGTERM', onSignal);
      });
    }));
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

async function forward(url: string, req: IncomingMessage, rawBody: Buffer): Promise<{ status?: number; error?: string }> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (value !== undefined && !HOP_HEADERS.has(name)) headers[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  try {
    const res = await request(url, { method: 'POST', headers, body: rawBody, headersTimeout: 10_000, bodyTimeout: 10_000 });
    await res.body.dump();
    return { status: res.statusCode };
  } catch (err) {
    return { error: (err as Error).message };
  }
}
