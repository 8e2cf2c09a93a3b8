// One pino logger for the process, JSON lines on stdout. Code logs ids, paths without query strings
// and sizes, never the API key or a user token; the redaction paths are a safety net for a
// credential-bearing object logged by mistake.
import pino, { type DestinationStream, type Logger } from 'pino';

export type { Logger };

const redactedPaths = [
  'apiKey', 'token', 'authorization', 'cookie',
  'headers.authorization', 'headers.cookie', 'headers["sec-websocket-protocol"]',
  'req.headers.authorization', 'req.headers.cookie', 'req.headers["sec-websocket-protocol"]',
];

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    { name: 'proxy', level, base: { pid: process.pid }, redact: { paths: redactedPaths, censor: '[redacted]' } },
    destination ?? pino.destination({ sync: false }),
  );
}
