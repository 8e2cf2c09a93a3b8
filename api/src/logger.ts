// One pino logger for the process. Credentials never reach a log line: the paths below are censored
// wherever they appear, and code logs ids, never values.
import pino, { type DestinationStream, type Logger } from 'pino';

export type { Logger };

const redactedPaths = [
  'authorization', '*.authorization', 'headers.authorization', '*.headers.authorization',
  'cookie', '*.cookie', 'headers.cookie', '*.headers.cookie',
  'password', '*.password', 'secret', '*.secret', 'secrets', '*.secrets',
  'token', '*.token', 'apiKey', '*.apiKey', 'value', '*.value',
];

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    { level, base: { pid: process.pid }, redact: { paths: redactedPaths, censor: '[redacted]' } },
    destination ?? pino.destination({ sync: false, minLength: 4096 }),
  );
}
