// A version's or a task's live log, behind one small module so the view does not care about the wire shape
// (docs/api.md, "Logs"): GET /v2/svc/functions/{f}/versions/{v}/logs?tail=&follow=true (or
// /v1/svct/tasks/{t}/logs) answers Server-Sent
// Events, one `log` event per line (data: a LogLine), a `caught-up` event once the kept lines are sent,
// then new lines as they are written. It is read with fetch(): EventSource cannot send the bearer. A 503
// means this platform cannot reach the output now (an API replica that neither runs placement, which holds
// the agents' links, nor reaches it over NATS): the view says logs are not available, with the API's reason.
import { ApiError, enc, type ProblemBody } from './api.ts';
import { credential } from './session.ts';

export type LogLine = { timestamp?: string; instanceId?: string; stream?: string; text: string };
export type LogHandlers = {
  line(line: LogLine): void;
  caughtUp?(): void;
  unavailable(error: ApiError): void;
  /** The platform closed the stream (a restart, a replica gone). */
  ended?(): void;
  failed(error: Error): void;
};

export const LOGS_UNAVAILABLE = 'Logs are not available here now.';

export type LogSource = { functionId: string; versionId: string; instanceId?: string } | { taskId: string };

export function logsPath(source: LogSource, tail = 200): string {
  const query = new URLSearchParams({ tail: String(tail), follow: 'true' });
  if ('taskId' in source) return `/v1/svct/tasks/${enc(source.taskId)}/logs?${query}`;
  if (source.instanceId) query.set('instanceId', source.instanceId);
  return `/v2/svc/functions/${enc(source.functionId)}/versions/${enc(source.versionId)}/logs?${query}`;
}

/** Follows a version's or a task's log until the returned function is called. */
export function followLogs(source: LogSource, handlers: LogHandlers): () => void {
  const abort = new AbortController();
  void read(logsPath(source), abort.signal, handlers).then(() => {
    if (!abort.signal.aborted) handlers.ended?.();
  }, (error: unknown) => {
    if (abort.signal.aborted) return;
    if (error instanceof ApiError && error.status === 503) handlers.unavailable(error);
    else handlers.failed(error instanceof Error ? error : new Error(String(error)));
  });
  return () => abort.abort();
}

async function read(path: string, signal: AbortSignal, handlers: LogHandlers) {
  const response = await fetch(path, {
    headers: { authorization: `Bearer ${credential.get() ?? ''}`, accept: 'text/event-stream' },
    credentials: 'omit', signal,
  });
  if (!response.ok) {
    throw new ApiError(response.status, await response.json().catch(() => ({})) as ProblemBody);
  }
  const decoder = new TextDecoder();
  const reader = response.body!.getReader();
  let pending = '';
  let event = 'message';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    pending += decoder.decode(value, { stream: true });
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const raw of lines) {
      // Server-Sent Events: `event:` names what the next `data:` is; a blank line ends it; `:` is a comment.
      if (raw.startsWith('event:')) event = raw.slice(6).trim();
      else if (raw === '') event = 'message';
      else if (raw.startsWith('data:') && event === 'caught-up') handlers.caughtUp?.();
      else if (raw.startsWith('data:')) {
        const line = parse(raw.slice(5).trimStart());
        if (line) handlers.line(line);
      }
    }
  }
}

/** A LogLine; anything else (a newer event this console does not know) is skipped. */
function parse(data: string): LogLine | undefined {
  try {
    const value = JSON.parse(data) as Record<string, unknown>;
    if (typeof value.text !== 'string') return undefined;
    const str = (key: string) => (typeof value[key] === 'string' ? value[key] as string : undefined);
    return { text: value.text, timestamp: str('timestamp'), instanceId: str('instanceId'), stream: str('stream') };
  } catch {
    return undefined;
  }
}
