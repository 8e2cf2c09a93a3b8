// A version's live log, behind one small module so the view does not care about the wire shape.
// Assumed shape (issue 28, not on main yet): GET /v2/svc/functions/{f}/versions/{v}/logs?tail=&follow=true
// answering Server-Sent Events (`data: <json or text>`) or plain lines, chunked. A 404 from the router
// ("No route …") means this platform has no logs API: the view says so.
import { ApiError, enc, type ProblemBody } from './api.ts';
import { credential } from './session.ts';

export type LogLine = { at?: string; instanceId?: string; stream?: string; text: string };
export type LogHandlers = { line(line: LogLine): void; unavailable(): void; failed(error: Error): void };

export const LOGS_UNAVAILABLE = 'Logs are not available on this platform.';

export function logsPath(functionId: string, versionId: string, options: { instance?: string; tail?: number } = {}): string {
  const query = new URLSearchParams({ tail: String(options.tail ?? 200), follow: 'true' });
  if (options.instance) query.set('instance', options.instance);
  return `/v2/svc/functions/${enc(functionId)}/versions/${enc(versionId)}/logs?${query}`;
}

/** Follows the log until the returned function is called. */
export function followLogs(functionId: string, versionId: string, handlers: LogHandlers, options: { instance?: string } = {}): () => void {
  const abort = new AbortController();
  void read(logsPath(functionId, versionId, options), abort.signal, handlers).catch((error: unknown) => {
    if (!abort.signal.aborted) handlers.failed(error instanceof Error ? error : new Error(String(error)));
  });
  return () => abort.abort();
}

async function read(path: string, signal: AbortSignal, handlers: LogHandlers) {
  const response = await fetch(path, {
    headers: { authorization: `Bearer ${credential.get() ?? ''}`, accept: 'text/event-stream, text/plain, application/x-ndjson' },
    credentials: 'omit', signal,
  });
  if (!response.ok) {
    const problem = await response.json().catch(() => ({})) as ProblemBody;
    if (response.status === 404 && /^No route/.test(problem.detail ?? '')) return handlers.unavailable();
    throw new ApiError(response.status, problem);
  }
  const sse = (response.headers.get('content-type') ?? '').includes('text/event-stream');
  const decoder = new TextDecoder();
  const reader = response.body!.getReader();
  let pending = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    pending += decoder.decode(value, { stream: true });
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const raw of lines) {
      const line = sse ? (raw.startsWith('data:') ? raw.slice(5).trimStart() : undefined) : raw;
      if (line) handlers.line(parse(line));
    }
  }
}

/** A JSON line with `text` (or `line`/`message`) and optional instance and time, else the raw text. */
function parse(line: string): LogLine {
  if (!line.startsWith('{')) return { text: line };
  try {
    const value = JSON.parse(line) as Record<string, unknown>;
    const text = value.text ?? value.line ?? value.message;
    if (typeof text !== 'string') return { text: line };
    const str = (key: string) => (typeof value[key] === 'string' ? value[key] as string : undefined);
    return { text, at: str('at') ?? str('time') ?? str('timestamp'), instanceId: str('instanceId'), stream: str('stream') };
  } catch {
    return { text: line };
  }
}
