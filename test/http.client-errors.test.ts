import { createServer } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.ts';
import { handleClientError } from '../src/http/client-error.ts';
import { ADMIN_TOKEN, startTestApp, testEnv, type TestApp } from './helpers/app.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

interface RawAnswer { status: number; headers: Record<string, string>; body: Json; closedAfterMs: number }

/**
 * Writes raw bytes to a fresh connection (optionally more later) and reads until the server
 * closes it: the bytes a client would see, without any HTTP client's own checks in the way.
 */
function raw(port: number, bytes: Buffer | string, options: { timeoutMs?: number } = {}): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => { socket.destroy(); reject(new Error(`connection still open after ${options.timeoutMs ?? 5000} ms`)); }, options.timeoutMs ?? 5000);
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', () => { /* a reset after the answer: the answer is what counts */ });
    socket.on('close', () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('utf8');
      const [head, ...rest] = text.split('\r\n\r\n');
      const [statusLine, ...headerLines] = head.split('\r\n');
      const headers = Object.fromEntries(headerLines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
      let body: Json = rest.join('\r\n\r\n');
      try { body = JSON.parse(body); } catch { /* kept as text for the failure message */ }
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body, closedAfterMs: performance.now() - started });
    });
    socket.write(bytes);
  });
}

const MESSAGES: Record<number, string> = {
  400: 'Malformed HTTP request',
  408: 'The request was not received in time',
  431: 'The request headers are too large',
};

function expectEnvelope(answer: RawAnswer, status: number) {
  expect(answer.status, JSON.stringify(answer)).toBe(status);
  expect(answer.headers['content-type']).toMatch(/^application\/json/);
  expect(answer.headers['x-request-id']).toMatch(/^req_[0-9a-f]{12}$/);
  expect(answer.body).toEqual({
    success: false,
    error: { code: 'VALIDATION_ERROR', message: MESSAGES[status] },
    meta: { request_id: answer.headers['x-request-id'], timestamp: expect.any(String) },
  });
}

describe('errors before the router: HTTP parser errors and timeouts over a real socket', () => {
  let t: TestApp;
  let port: number;
  beforeAll(async () => {
    t = await startTestApp({ HTTP_REQUEST_TIMEOUT_MS: '600', HTTP_HEADERS_TIMEOUT_MS: '400' });
    await t.app.listen({ port: 0, host: '127.0.0.1' });
    port = (t.app.server.address() as AddressInfo).port;
  });
  afterAll(async () => { await t?.close(); });

  const cases: [string, Buffer | string, number][] = [
    ['a malformed request line', 'GARBAGE\r\n\r\n', 400],
    ['non-ASCII bytes in the path', Buffer.concat([Buffer.from('GET /api/v1/public/contacts/'), Buffer.from([0xff, 0xfe, 0x01]), Buffer.from(' HTTP/1.1\r\nHost: x\r\n\r\n')]), 400],
    ['a control byte in a header value', 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Note: a\x01b\r\n\r\n', 400],
    ['a header name with a space', 'GET /healthz HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n', 400],
    ['Transfer-Encoding together with Content-Length', 'POST /api/v1/public/contacts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n', 400],
    ['bad chunking', 'POST /api/v1/public/contacts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n{}\r\n0\r\n\r\n', 400],
    ['oversized headers', `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431],
  ];
  for (const [name, bytes, status] of cases) {
    it(`${name}: ${status} in the envelope with X-Request-Id, connection closed`, async () => {
      const answer = await raw(port, bytes);
      expectEnvelope(answer, status);
      expect(answer.headers.connection).toBe('close');
    });
  }

  it('a declared body that never arrives (Content-Length: 100, 10 bytes sent): 408 and closed after HTTP_REQUEST_TIMEOUT_MS', async () => {
    const answer = await raw(port, `POST /admin/v1/tenants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${ADMIN_TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"name":"T`);
    expectEnvelope(answer, 408);
    expect(answer.closedAfterMs).toBeGreaterThanOrEqual(550);
    expect(answer.closedAfterMs).toBeLessThan(2500);
  });

  it('the same after an early answer (401 before the body was read): the connection is still closed after the timeout', async () => {
    const answer = await raw(port, 'POST /api/v1/public/contacts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"first_na');
    expect(answer.status).toBe(401);
    expect(answer.closedAfterMs).toBeGreaterThanOrEqual(550);
    expect(answer.closedAfterMs).toBeLessThan(2500);
  });

  it('headers that never end: 408 and closed after HTTP_HEADERS_TIMEOUT_MS', async () => {
    const answer = await raw(port, 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n');
    expectEnvelope(answer, 408);
    expect(answer.closedAfterMs).toBeGreaterThanOrEqual(350);
    expect(answer.closedAfterMs).toBeLessThan(2500);
  });

  it('a well-formed request on the same server is unaffected', async () => {
    const answer = await raw(port, 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({ status: 'ok' });
  });
});

describe('a parser error or timeout on a connection whose response has already started', () => {
  it('gets no second answer (it would corrupt the response under way): the connection is only closed', async () => {
    // No route of the API streams, so a plain server stands in for one whose handler has begun
    // answering before the request body arrived, and the body then times out.
    const server = createServer({ requestTimeout: 300, headersTimeout: 200, connectionsCheckingInterval: 50 }, (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('partial');
    });
    server.on('clientError', handleClientError);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const answer = await raw((server.address() as AddressInfo).port, 'POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789');
      expect(answer.status).toBe(200);
      expect(answer.body).toContain('partial');
      expect(answer.body).not.toContain('HTTP/1.1');
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('HTTP timeouts configuration', () => {
  it('defaults bound a request, its headers and idle keep-alive connections; headers may not outlast the request', () => {
    const config = loadConfig(testEnv());
    expect([config.httpRequestTimeoutMs, config.httpHeadersTimeoutMs, config.httpKeepAliveTimeoutMs]).toEqual([120_000, 10_000, 72_000]);
    expect(() => loadConfig(testEnv({ HTTP_REQUEST_TIMEOUT_MS: '1000', HTTP_HEADERS_TIMEOUT_MS: '5000' }))).toThrow(ConfigError);
    expect(() => loadConfig(testEnv({ HTTP_REQUEST_TIMEOUT_MS: '0' }))).toThrow(ConfigError);
  });
});
