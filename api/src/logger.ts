// One pino logger for the process. Credentials never reach a log line: the paths below are censored
// wherever they appear, and code logs ids, never values.
import pino, { type DestinationStream, type Logger } from 'pino';

export type { Logger };

// Wildcards make every log call slower, so only the shapes a log line can really take are listed:
// a credential-bearing field at the top or inside req/headers.
const redactedPaths = [
  'authorization', 'cookie', 'password', 'secret', 'secrets', 'token', 'apiKey', 'value',
  'headers.authorization', 'headers.cookie', 'req.headers.authorization', 'req.headers.cookie',
  'body.secrets', 'body.password', 'body.value',
];

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    { level, base: { pid: process.pid }, redact: { paths: redactedPaths, censor: '[redacted]' } },
    destination ?? pino.destination({ sync: false, minLength: 4096 }),
  );
}
