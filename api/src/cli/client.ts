// HTTP to the gateway: picks the host (api. or api-keys.) by setting Host, so one URL reaches both.
// node:http rather than fetch, because fetch derives Host from the URL and will not let it be set.
import http from 'node:http';
import https from 'node:https';
import { z } from 'zod';
import type { CliState } from './state.ts';

export class CliError extends Error {
  override name = 'CliError';
}

export type Host = 'api' | 'keys';

export interface CallOptions {
  bearer?: string;
  body?: unknown;
  headers?: Record<string, string>;
}

/**
 * Sends one request and decodes its answer with `answer`: the route's own response schema where the command
 * reads the record, `nothing` for a 204. An answer that does not decode ends the command in one line.
 */
export async function call<S extends z.ZodType>(state: CliState, host: Host, method: string, path: string, answer: S,
  options: CallOptions = {}): Promise<z.output<S>> {
  const url = new URL(path, state.server);
  const headers: Record<string, string> = {
    host: `${host === 'api' ? 'api' : 'api-keys'}.${state.gatewayAddress}${url.port ? `:${url.port}` : ''}`,
    accept: 'application/json',
    ...options.headers,
  };
  if (options.bearer) headers.authorization = `Bearer ${options.bearer}`;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  let response: { status: number; text: string };
  try {
    response = await send(url, method, headers, options.body === undefined ? undefined : JSON.stringify(options.body));
  } catch (error) {
    const cause = (error as { code?: string }).code ?? (error as Error).message;
    throw new CliError(`cannot reach ${state.server} (${cause}); is \`svc serve\` running?`);
  }
  if (response.status >= 400) throw new CliError(`${method} ${path} failed (${response.status}): ${failureDetail(response.text)}`);
  return decode(answer, response.text, `${method} ${path}`, state.server);
}

/** Every item of a listing on the api host: `path` with `query`, then each next page by its cursor. */
export async function everyPage<Page extends { cursor?: string }, Item>(state: CliState, path: string, query: URLSearchParams,
  page: z.ZodType<Page>, itemsOf: (page: Page) => Item[], bearer: string): Promise<Item[]> {
  const items: Item[] = [];
  const next = new URLSearchParams(query);
  let cursor: string | undefined;
  do {
    if (cursor) next.set('cursor', cursor);
    const answer = await call(state, 'api', 'GET', `${path}?${next}`, page, { bearer });
    items.push(...itemsOf(answer));
    cursor = answer.cursor;
  } while (cursor);
  return items;
}

/** The answer of a call whose body is not read: a 204, no body at all. */
export const nothing = z.undefined();

function decode<S extends z.ZodType>(answer: S, text: string, request: string, server: string): z.output<S> {
  // Most likely the server is not an svc gateway, or not one of this CLI's version.
  const hint = `is ${server} an svc gateway of this CLI's version?`;
  const json = text ? parseJson(text) : { value: undefined };
  if (!json) throw new CliError(`${request} answered something that is not JSON (${JSON.stringify(text.slice(0, 40))}); ${hint}`);
  const decoded = answer.safeParse(json.value);
  if (!decoded.success) throw new CliError(`${request} answered what svc does not (${firstIssue(decoded.error)}); ${hint}`);
  return decoded.data;
}

/** The first thing wrong with an answer, on one line, and how many more there are. */
function firstIssue(error: z.ZodError): string {
  const [issue, ...more] = error.issues;
  const where = issue.path.length ? `${issue.path.join('.')}: ` : '';
  return `${where}${issue.message}${more.length ? `; ${more.length} more` : ''}`;
}

function send(url: URL, method: string, headers: Record<string, string>, body?: string): Promise<{ status: number; text: string }> {
  const transport = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const request = transport.request(url, { method, headers }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
      response.on('error', reject);
    });
    request.on('error', reject);
    request.end(body);
  });
}

const problemBody = z.object({ detail: z.string() });

/** What a failed response says: its problem's detail, else the start of its text. */
export function failureDetail(text: string): string {
  const problem = problemBody.safeParse(parseJson(text)?.value);
  return problem.success ? problem.data.detail : text.slice(0, 200);
}

/** The JSON value of `text`, or undefined when `text` is not JSON. */
function parseJson(text: string): { value: unknown } | undefined {
  try {
    return { value: JSON.parse(text) };
  } catch {
    return undefined;
  }
}

/**
 * Follows a text/event-stream on the api host: each event's name and decoded data to onEvent, until the
 * server ends the stream (or the command is interrupted). A refusal ends the command in one line.
 */
export async function followEvents<S extends z.ZodType>(state: CliState, path: string, data: S, bearer: string,
  onEvent: (event: string, value: z.output<S> | undefined) => void): Promise<void> {
  const url = new URL(path, state.server);
  const headers = {
    host: `api.${state.gatewayAddress}${url.port ? `:${url.port}` : ''}`, accept: 'text/event-stream', authorization: `Bearer ${bearer}`,
  };
  const transport = url.protocol === 'https:' ? https : http;
  const response = await new Promise<http.IncomingMessage>((resolve, reject) => {
    transport.get(url, { headers }, resolve).on('error', (error: NodeJS.ErrnoException) =>
      reject(new CliError(`cannot reach ${state.server} (${error.code ?? error.message}); is \`svc serve\` running?`)));
  });
  if ((response.statusCode ?? 0) >= 400) {
    const chunks: Buffer[] = [];
    for await (const chunk of response) chunks.push(chunk as Buffer);
    throw new CliError(`GET ${path} failed (${response.statusCode}): ${failureDetail(Buffer.concat(chunks).toString('utf8'))}`);
  }
  response.setEncoding('utf8');
  let buffered = '';
  for await (const chunk of response) {
    buffered += chunk as string;
    let end: number;
    while ((end = buffered.indexOf('\n\n')) >= 0) {
      const block = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      const event = /^event: (.*)$/m.exec(block)?.[1] ?? 'message';
      const text = /^data: (.*)$/m.exec(block)?.[1];
      if (text === undefined) continue; // a keep-alive comment
      const decoded = data.safeParse(parseJson(text)?.value);
      onEvent(event, decoded.success ? decoded.data : undefined);
    }
  }
}
