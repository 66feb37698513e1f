import { STATUS_CODES, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { errorEnvelope } from './errors.ts';
import { newRequestId } from './request-id.ts';

/** What the HTTP parser (or the server's timeouts) refused, as the status and message the caller gets. */
function describe(code: string | undefined): { status: number; message: string } {
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') return { status: 408, message: 'The request was not received in time' };
  if (code === 'HPE_HEADER_OVERFLOW') return { status: 431, message: 'The request headers are too large' };
  return { status: 400, message: 'Malformed HTTP request' };
}

/**
 * Answers requests the HTTP parser rejects before any route or hook runs (a malformed request
 * line, bytes a URL or header may not hold, Transfer-Encoding with Content-Length, bad chunking,
 * oversized headers, a request not received within the timeouts) in the error envelope with an
 * X-Request-Id, then closes the connection: after a parser error its bytes cannot be trusted.
 */
export function handleClientError(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  // As Node does by default: answer only when no response has started on this socket, or the
  // bytes would corrupt it (a body that fails after its request reached a handler).
  const inFlight = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (!socket.writable || inFlight?.headersSent) {
    socket.destroy();
    return;
  }
  const { status, message } = describe(err.code);
  const requestId = newRequestId();
  const body = JSON.stringify(errorEnvelope(requestId, 'VALIDATION_ERROR', message));
  socket.write(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nX-Request-Id: ${requestId}\r\nConnection: close\r\n\r\n${body}`,
  );
  // Closed once the answer is flushed, whether or not the client reads or closes its side.
  socket.destroySoon();
}
