import type { FastifyPluginAsync } from 'fastify';
import type { ClicksService } from './clicks.service.ts';

const NOT_FOUND_PAGE = '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Link not found</title>'
  + '<meta name="viewport" content="width=device-width, initial-scale=1"></head>'
  + '<body style="font-family: sans-serif; margin: 3em auto; max-width: 32em; padding: 0 1em">'
  + '<h1>Link not found</h1><p>This link is not valid or no longer leads anywhere.</p></body></html>\n';

/** The click-tracking redirect: outside the API base path, no authentication (the token is the credential). */
export const clickRoutes: FastifyPluginAsync<{ clicks: ClicksService }> = async (app, { clicks }) => {
  app.get<{ Params: { token: string } }>('/r/:token', async (req, reply) => {
    const destination = await clicks.click(req.params.token);
    reply.header('cache-control', 'no-store').header('referrer-policy', 'no-referrer').header('x-robots-tag', 'noindex');
    if (!destination) return reply.code(404).type('text/html; charset=utf-8').send(NOT_FOUND_PAGE);
    return reply.redirect(destination, 302);
  });
};
