// One pino logger for the process, JSON on stdout. Code logs ids and sizes, never credentials; the
// redaction paths are a safety net in case a credential-bearing object is ever logged by mistake.
import pino, { type DestinationStream, type Logger } from 'pino';

export type { Logger };

const redactedPaths = [
  'password', '*.password', 'credential', '*.credential', 'resumeToken', '*.resumeToken',
  'iceServers', '*.iceServers', 'creds', '*.creds',
];

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    { name: 'streaming-app', level, base: { pid: process.pid }, redact: { paths: redactedPaths, censor: '[redacted]' } },
    // Synchronous writes: the process exits right after its session, and a buffered line would be lost.
    destination ?? pino.destination({ sync: true }),
  );
}
