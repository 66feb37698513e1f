import pino, { type Logger } from 'pino';

export function createLogger(level: string): Logger {
  return pino({
    level,
    // Secrets never reach the logs, whatever a caller logs by mistake.
    redact: {
      paths: ['req.headers.authorization', 'headers.authorization', '*.access_token', '*.signing_secret', '*.key', 'access_token', 'signing_secret'],
      censor: '[redacted]',
    },
  });
}
