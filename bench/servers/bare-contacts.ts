// Baseline: the bare minimum for a primary-key lookup over HTTP (Fastify + pg, no auth, no limits).
import Fastify from 'fastify';
import pg from 'pg';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 20 });
const app = Fastify();
app.get('/healthz', async () => ({ ok: true }));
app.get('/contacts/:id', async (req) => {
  const { rows } = await pool.query('SELECT * FROM contacts WHERE id = $1', [(req.params as { id: string }).id]);
  return rows[0];
});
await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' });
process.on('SIGTERM', async () => { await app.close(); await pool.end(); process.exit(0); });
