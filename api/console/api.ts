// Calls to the platform's API from the page: same origin, the tab's credential as bearer. A refusal
// becomes an ApiError whose message is the API's problem detail as a sentence.
import { credential } from './session.ts';

export type ProblemBody = { type?: string; title?: string; status?: number; detail?: string; requestId?: string };

export class ApiError extends Error {
  readonly status: number;
  readonly problem: ProblemBody;
  constructor(status: number, problem: ProblemBody) {
    super(sentence(status, problem));
    this.status = status;
    this.problem = problem;
  }
}

/** The problem's detail as a sentence a person reads: "Not Found: No function x." */
export function sentence(status: number, problem: ProblemBody): string {
  const title = problem.title ?? `HTTP ${status}`;
  const detail = (problem.detail ?? '').trim();
  const ended = (text: string) => (/[.!?]$/.test(text) ? text : `${text}.`);
  // A detail that already starts with its title ("Validation failed: …") is not prefixed twice.
  const said = !detail ? `${title}.` : detail.toLowerCase().startsWith(title.toLowerCase()) ? ended(detail) : ended(`${title}: ${detail}`);
  return problem.requestId ? `${said} (request ${problem.requestId})` : said;
}

/** Whether the API refused the credential itself (unknown, revoked, expired), as opposed to not answering. */
export const refusesCredential = (error: unknown) => error instanceof ApiError && (error.status === 401 || error.status === 403);

/**
 * Pauses before a GET that got no answer at all is sent again: the browser fails the requests in flight when
 * it sees the network change (a reload at that moment would otherwise sign the tab out), and a GET changes
 * nothing. Other methods are never sent twice.
 */
const RESEND_GET_AFTER_MS = [250, 1000];

async function send(path: string, init: RequestInit & { method: string }): Promise<Response> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fetch(path, init);
    } catch {
      const pause = init.method === 'GET' ? RESEND_GET_AFTER_MS[attempt] : undefined;
      if (pause === undefined) throw new ApiError(0, { title: 'No answer', detail: 'The platform could not be reached; check that it runs and try again' });
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
}

export async function call<T>(method: string, path: string, body?: unknown, bearer = credential.get(), extra: Record<string, string> = {}): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json', ...extra };
  if (bearer) headers.authorization = `Bearer ${bearer}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await send(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'omit' });
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  if (!response.ok) throw new ApiError(response.status, (parsed as ProblemBody | undefined) ?? { detail: text.slice(0, 200) });
  return parsed as T;
}

export const get = <T>(path: string) => call<T>('GET', path);
export const enc = encodeURIComponent;
