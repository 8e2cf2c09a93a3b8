// HTTP to the gateway: picks the host (api. or api-keys.) by setting Host, so one URL reaches both.
// node:http rather than fetch, because fetch derives Host from the URL and will not let it be set.
import http from 'node:http';
import https from 'node:https';
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

export async function call(state: CliState, host: Host, method: string, path: string, options: CallOptions = {}) {
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
  const body = response.text ? parseJson(response.text) : undefined;
  if (response.status >= 400) {
    const detail = (body as { detail?: string } | undefined)?.detail ?? response.text.slice(0, 200);
    throw new CliError(`${method} ${path} failed (${response.status}): ${detail}`);
  }
  return body;
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

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
