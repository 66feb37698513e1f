import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { extname, join, relative } from 'node:path';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import type { ApiKeyAuthenticator } from '../../http/auth.ts';
import type { ConsoleLinks } from './console-links.ts';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml', '.png': 'image/png', '.ico': 'image/x-icon', '.json': 'application/json', '.txt': 'text/plain; charset=utf-8',
};

interface StaticFile { type: string; body: Buffer; gzip?: Buffer; brotli?: Buffer; immutable: boolean }

/**
 * The built console (scripts/build.mjs: Vite into dist/console, each file beside its .gz and .br),
 * read once into memory: a few hundred kilobytes. Files under assets/ carry their content hash in
 * their names and are cached for a year; index.html is revalidated on every load.
 */
export function loadConsoleFiles(dir: string): Map<string, StaticFile> {
  const files = new Map<string, StaticFile>();
  if (!existsSync(dir)) return files;
  const visit = (at: string) => {
    for (const entry of readdirSync(at, { withFileTypes: true })) {
      const path = join(at, entry.name);
      if (entry.isDirectory()) { visit(path); continue; }
      if (/\.(gz|br)$/.test(entry.name)) continue;
      const name = relative(dir, path).split('\\').join('/');
      files.set(name, {
        type: TYPES[extname(name)] ?? 'application/octet-stream',
        body: readFileSync(path),
        gzip: existsSync(`${path}.gz`) ? readFileSync(`${path}.gz`) : undefined,
        brotli: existsSync(`${path}.br`) ? readFileSync(`${path}.br`) : undefined,
        immutable: name.startsWith('assets/'),
      });
    }
  };
  visit(dir);
  return files;
}

function sendFile(request: FastifyRequest, reply: FastifyReply, file: StaticFile) {
  const accepts = String(request.headers['accept-encoding'] ?? '');
  reply.type(file.type).header('vary', 'accept-encoding')
    .header('cache-control', file.immutable ? 'public, max-age=31536000, immutable' : 'no-cache')
    .header('x-content-type-options', 'nosniff');
  if (file.type.startsWith('text/html')) {
    // The console talks to this origin's API only; nothing else may load, frame it or read the fragment's link.
    reply.header('content-security-policy', "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
      .header('referrer-policy', 'no-referrer');
  }
  if (file.brotli && /\bbr\b/.test(accepts)) return reply.header('content-encoding', 'br').send(file.brotli);
  if (file.gzip && /\bgzip\b/.test(accepts)) return reply.header('content-encoding', 'gzip').send(file.gzip);
  return reply.send(file.body);
}

const Session = Type.Object({ key: Type.String(), scopes: Type.Array(Type.String()), expires_at: Type.String() });

export const consoleRoutes: FastifyPluginAsyncTypebox<{ dir: string; links: ConsoleLinks; authenticator: ApiKeyAuthenticator }> = async (app, { dir, links, authenticator }) => {
  const files = loadConsoleFiles(dir);
  const index = files.get('index.html');
  const page = async (request: FastifyRequest, reply: FastifyReply) => {
    if (!index) return reply.code(503).type('text/plain; charset=utf-8').send('The console is not built: run `npm run build`.\n');
    return sendFile(request, reply, index);
  };
  app.get('/console', (request, reply) => reply.redirect('/console/'));
  app.get('/console/', page);
  app.get<{ Params: { '*': string } }>('/console/*', async (request, reply) => {
    const file = files.get(request.params['*']);
    if (file) return sendFile(request, reply, file);
    if (request.params['*'].startsWith('assets/')) return reply.code(404).type('text/plain; charset=utf-8').send('Not found\n');
    return page(request, reply);
  });

  // Sign-in plumbing, outside the public API: the pages themselves talk to the public API only.
  app.post('/console/session/link', { schema: { body: Type.Object({ token: Type.String({ maxLength: 200 }) }), response: { 200: Session } } },
    (request) => links.redeem(request.body.token));
  /** The key's own grants, so the pages can show what it may not do (and why) before it is tried. */
  app.get('/console/session', async (request) => {
    const record = await authenticator.identify(request);
    return { tenant_id: record.auth.tenantId, key_id: record.auth.keyId, scopes: record.auth.scopes, plan: record.auth.plan, expires_at: record.expiresAt?.toISOString() ?? null };
  });
  app.delete('/console/session', async (request) => {
    const record = await authenticator.identify(request);
    return links.end(record.auth.tenantId, record.auth.keyId);
  });
};
