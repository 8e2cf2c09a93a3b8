// A tiny HTTP client for tests that can set Host (fetch cannot), so one listener serves every host.
import http from 'node:http';
import https from 'node:https';

export interface TestResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  /** Parsed JSON body, or undefined when empty or not JSON. */
  body: any;
}

export interface RequestOptions {
  host?: string;
  bearer?: string;
  headers?: Record<string, string>;
  /** Sent as JSON unless it is already a string. */
  body?: unknown;
  ca?: string | Buffer;
}

export function request(baseUrl: string, method: string, path: string, options: RequestOptions = {}): Promise<TestResponse> {
  const url = new URL(path, baseUrl);
  const headers: Record<string, string> = { ...options.headers };
  if (options.host) headers.host = `${options.host}:${url.port}`;
  if (options.bearer) headers.authorization = `Bearer ${options.bearer}`;
  let payload: string | undefined;
  if (options.body !== undefined) {
    payload = typeof options.body === 'string' ? options.body : JSON.stringify(options.body);
    headers['content-type'] ??= 'application/json';
  }
  const transport = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = transport.request(url, { method, headers, agent: false, ca: options.ca }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body: unknown;
        try {
          body = text ? JSON.parse(text) : undefined;
        } catch {
          body = undefined;
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, body });
      });
    });
    req.on('error', reject);
    req.end(payload);
  });
}
