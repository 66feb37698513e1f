import { randomBytes } from 'node:crypto';
import { Agent, request } from 'undici';

export interface CapacityOptions {
  /** The sandbox's Graph base URL, with the version (Sandbox.baseUrl). */
  baseUrl: string;
  seconds: number;
  concurrency: number;
}

export interface CapacityResult {
  sendsPerSecond: number;
  sends: number;
  errors: number;
  seconds: number;
}

const PROBE_TOKEN = 'capacity-probe-token';

/**
 * Fires valid template sends straight at the sandbox for `seconds` with `concurrency` requests
 * in flight, and reports accepted sends per second: the ceiling the service's own throughput is
 * compared with. Uses its own WABA, phone number and template, so it never touches a tenant's;
 * status callbacks for its sends go to the sandbox's callback URL like any others (the receiver
 * acknowledges and ignores an unknown phone-number id).
 */
export async function measureSandboxCapacity(options: CapacityOptions): Promise<number> {
  return (await measureSandboxCapacityDetailed(options)).sendsPerSecond;
}

/** The same measurement with its counts. */
export async function measureSandboxCapacityDetailed(options: CapacityOptions): Promise<CapacityResult> {
  const base = options.baseUrl.replace(/\/+$/, '');
  const root = new URL(base).origin;
  const agent = new Agent({ connections: Math.max(options.concurrency, 1), pipelining: 1, keepAliveTimeout: 30_000 });
  const suffix = randomBytes(4).toString('hex');
  const wabaId = `9${Date.now()}`;
  const phoneNumberId = `8${Date.now()}`;
  const name = `capacity_probe_${suffix}`;
  const headers = { authorization: `Bearer ${PROBE_TOKEN}`, 'content-type': 'application/json' };
  const post = async (url: string, body: unknown) => {
    const res = await request(url, { method: 'POST', headers, body: JSON.stringify(body), dispatcher: agent });
    const text = await res.body.text();
    return { status: res.statusCode, text };
  };
  try {
    await post(`${root}/__sandbox/phone_numbers`, { phone_number_id: phoneNumberId, waba_id: wabaId });
    const created = await post(`${base}/${wabaId}/message_templates`, {
      name, language: 'en', category: 'UTILITY', components: [{ type: 'BODY', text: 'Hello {{1}}, your code is {{2}}.', example: { body_text: [['Ada', '1']] } }],
    });
    if (created.status !== 200) throw new Error(`capacity probe: template create failed: ${created.text}`);
    // The reviewer's decision, so the probe need not wait for the sandbox's review delay.
    await post(`${root}/__sandbox/templates/review`, { name, language: 'en', status: 'APPROVED' });

    const sendBody = (i: number) => JSON.stringify({
      messaging_product: 'whatsapp', to: `+1415${String(2_000_000 + (i % 7_000_000)).padStart(7, '0')}`, type: 'template',
      biz_opaque_callback_data: `probe-${i}`,
      template: { name, language: { code: 'en' }, components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ada' }, { type: 'text', text: String(i) }] }] },
    });
    const url = `${base}/${phoneNumberId}/messages`;
    let sends = 0;
    let errors = 0;
    let counter = 0;
    const started = process.hrtime.bigint();
    const deadline = Date.now() + options.seconds * 1000;
    const worker = async () => {
      while (Date.now() < deadline) {
        try {
          const res = await request(url, { method: 'POST', headers, body: sendBody(counter++), dispatcher: agent });
          await res.body.dump();
          if (res.statusCode === 200) sends++; else errors++;
        } catch {
          errors++;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.max(options.concurrency, 1) }, worker));
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    return { sendsPerSecond: Math.round(sends / seconds), sends, errors, seconds: Math.round(seconds * 100) / 100 };
  } finally {
    await agent.close();
  }
}
