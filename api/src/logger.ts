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

/**
 * Lines go to stdout asynchronously but at once: each write starts as soon as the previous one ended
 * (lines that arrive meanwhile go together), so the log is never more than one write behind, and
 * pino flushes what is left synchronously on exit. (A 4 KiB minimum write held lines back for minutes on
 * a quiet platform.)
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    { level, base: { pid: process.pid }, redact: { paths: redactedPaths, censor: '[redacted]' } },
    destination ?? pino.destination({ sync: false }),
  );
}

/** Output of a workload (an instance's or a task's last lines) with the values of its secrets redacted. */
export function withoutSecrets(lines: string[], secrets: { value: unknown }[]): string[] {
  const values = secretValues(secrets);
  return lines.map((line) => redactValues(line, values));
}

/**
 * What of some secrets must never be shown: each value (objects as JSON) and every string inside an
 * object value, longest first so that a value is redacted whole before a shorter one inside it. Values
 * under 4 characters are left alone: redacting them would garble the output and hide nothing.
 */
export function secretValues(secrets: { value: unknown }[]): string[] {
  const values = new Set<string>();
  const collect = (value: unknown): void => {
    if (typeof value === 'string') values.add(value);
    else if (Array.isArray(value)) value.forEach(collect);
    else if (value && typeof value === 'object') Object.values(value).forEach(collect);
  };
  for (const secret of secrets) {
    if (typeof secret.value !== 'string') values.add(JSON.stringify(secret.value));
    collect(secret.value);
  }
  return [...values].filter((value) => value.length >= 4).sort((a, b) => b.length - a.length);
}

export function redactValues(line: string, values: string[]): string {
  return values.reduce((text, value) => (text.includes(value) ? text.split(value).join('[redacted]') : text), line);
}

/** Query parameters whose values are credentials by name (over-matching is fine: the line keeps the name). */
const CREDENTIAL_NAME = /token|key|secret|passw|pwd|auth|signature|sig$|jwt|credential|session|cookie/i;
/** Values that are credentials whatever they are called: this platform's opaque keys, and JWTs. */
const CREDENTIAL_VALUE = /^(svc[a-z]*-[\w-]{20,}|eyJ[\w-]*\.eyJ[\w-]*\.)/;

function decoded(text: string): string {
  try {
    return decodeURIComponent(text.replace(/\+/g, ' '));
  } catch {
    return text;
  }
}

/**
 * A URL (or request path) fit for a log line: the password of userinfo, query values named like
 * credentials, and any path segment or value that is one (svcapi-…, a JWT) become [redacted].
 */
export function redactUrl(url: string): string {
  const question = url.indexOf('?');
  const base = (question < 0 ? url : url.slice(0, question))
    .replace(/^([a-z][\w+.-]*:\/\/[^/@:]*):[^/@]*@/i, '$1:[redacted]@')
    .split('/').map((segment) => (CREDENTIAL_VALUE.test(decoded(segment)) ? '[redacted]' : segment)).join('/');
  if (question < 0) return base;
  const query = url.slice(question + 1).split('&').map((pair) => {
    const eq = pair.indexOf('=');
    const name = eq < 0 ? '' : pair.slice(0, eq);
    const value = eq < 0 ? pair : pair.slice(eq + 1);
    if (!CREDENTIAL_NAME.test(decoded(name)) && !CREDENTIAL_VALUE.test(decoded(value))) return pair;
    return eq < 0 ? '[redacted]' : `${name}=[redacted]`;
  }).join('&');
  return `${base}?${query}`;
}
